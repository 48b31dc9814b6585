"""The chart's Grafana dashboards (no cluster needed).

Dashboard JSON: generated from helm/tools/, parses, current schemaVersion, datasource only through
the ``datasource`` variable (never ``${DS_PROMETHEUS}``), every panel has PromQL, only known metric
names; the chart ships each as a ConfigMap (needs a helm binary: built if missing; skipped only
outside CI). The rest of the chart's rendering: tests/unit/test_chart.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helm import CHART, by_kind, helm_binary, render

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
DS = {"type": "prometheus", "uid": "${datasource}"}
needs_helm = pytest.mark.skipif(
    helm_binary() is None and not os.environ.get("CI"),
    reason="no helm binary (devcluster/build.sh builds one); under CI=true the tests fail instead")

# Metric names the dashboards may use: what the operator and the trainer export (+ Prometheus' up).
OPERATOR_METRICS = {
    "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_time_seconds", "workqueue_depth", "workqueue_adds_total",
    "rest_client_requests_total", "rest_client_rate_limiter_duration_seconds",
    "rest_client_request_duration_seconds", "dpjob_pods_created_total",
    "dpjob_pods_deleted_total", "dpjob_restarts_total", "dpjob_job_transitions_total", "dpjob_jobs",
    "dpjob_jobs_unschedulable",
    "dpjob_time_to_all_pods_created_seconds", "dpjob_time_to_all_ranks_running_seconds",
    "dpjob_restart_detect_seconds", "dpjob_restart_recover_seconds",
}


def _trainer_metrics() -> set[str]:
    from dpjob_trainer import metrics

    return set(metrics.METRIC_NAMES)


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels") or [])
    return out


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_both_dashboards_exist():
    assert {p.name for p in DASHBOARDS} == {"dpjob-training.json", "dpjob-operator.json"}
    titles = {_load(p)["title"] for p in DASHBOARDS}
    assert titles == {"DataParallelJob training", "dpjob operator"}


def test_dashboards_are_generated_from_source():
    """helm/tools/dashboards.py is the source; the shipped JSON must be its current output."""
    proc = subprocess.run([sys.executable, str(REPO / "helm" / "tools" / "dashboards.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_conventions(path: Path):
    text = path.read_text()
    d = json.loads(text)
    assert d["schemaVersion"] >= 39
    assert "DS_PROMETHEUS" not in text and "__inputs" not in d and "__requires" not in d
    assert d["uid"] and len(d["uid"]) <= 40
    assert d["title"] and d["tags"] and d["time"] and d["refresh"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == DS
            assert v["query"].startswith("label_values(")
    ids = [p["id"] for p in _panels(d)]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    data_panels = [p for p in _panels(d) if p["type"] != "row"]
    assert len(data_panels) >= 8
    for panel in data_panels:
        assert panel["datasource"] == DS, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no targets"
        for t in panel["targets"]:
            assert t.get("expr", "").strip(), f"panel {panel['title']!r} target {t.get('refId')} has no expr"
            assert t["datasource"] == DS
            # Every variable used is defined (or a Grafana built-in).
            for var in re.findall(r"\$\{?(\w+)", t["expr"]):
                assert var.startswith("__") or var in variables, (panel["title"], var)
            if "rate(" in t["expr"] or "increase(" in t["expr"]:
                assert "[$__rate_interval]" in t["expr"], (panel["title"], t["expr"])
        gp = panel["gridPos"]
        assert gp["x"] >= 0 and gp["x"] + gp["w"] <= 24


def test_training_dashboard_covers_the_brief():
    d = _load(CHART / "dashboards" / "dpjob-training.json")
    exprs = " ".join(t["expr"] for p in _panels(d) for t in p.get("targets", []))
    assert "histogram_quantile(0.5, sum by (le) (rate(dpjob_trainer_step_duration_seconds_bucket" in exprs
    assert "histogram_quantile(0.99, sum by (le) (rate(dpjob_trainer_step_duration_seconds_bucket" in exprs
    assert re.search(r"rate\(dpjob_trainer_data_wait_seconds_total[^)]*\)\) / sum\(rate\("
                     r"dpjob_trainer_step_duration_seconds_sum", exprs)
    assert re.search(r"rate\(dpjob_trainer_comm_exposed_seconds_total[^)]*\)\) / sum\(rate\("
                     r"dpjob_trainer_step_duration_seconds_sum", exprs)
    for metric in ("dpjob_trainer_samples_total", "dpjob_trainer_loss", "dpjob_trainer_learning_rate",
                   "dpjob_trainer_grad_norm", "dpjob_trainer_last_step_timestamp_seconds", "dpjob_trainer_info"):
        assert metric in exprs
    assert re.search(r"max\(.*\) - min\(", exprs), "per-rank skew (max - min)"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["namespace"]["query"] == "label_values(dpjob_trainer_info, namespace)"
    assert "dpjob_trainer_info" in variables["job"]["query"]


def test_operator_dashboard_covers_the_brief():
    d = _load(CHART / "dashboards" / "dpjob-operator.json")
    exprs = " ".join(t["expr"] for p in _panels(d) for t in p.get("targets", []))
    for needle in ("rate(controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
                   "histogram_quantile(0.99, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket",
                   "rate(dpjob_pods_created_total",
                   "histogram_quantile(0.5, sum by (le) (rate(dpjob_time_to_all_ranks_running_seconds_bucket",
                   "histogram_quantile(0.99, sum by (le) (rate(dpjob_time_to_all_ranks_running_seconds_bucket",
                   "sum by (reason) (increase(dpjob_restarts_total", "sum by (phase) (dpjob_jobs",
                   "workqueue_depth", "rest_client_rate_limiter_duration_seconds_bucket"):
        assert needle in exprs, needle
    # controller-runtime names are shared with every Go operator: always scoped to our scrape job.
    for p in _panels(d):
        for t in p.get("targets", []):
            assert 'job=~"$operator"' in t["expr"], t["expr"]


def test_dashboards_use_only_exported_metrics():
    trainer = _trainer_metrics()
    known = set(OPERATOR_METRICS) | trainer | {"up"}
    suffixes = ("_bucket", "_sum", "_count", "_total")
    for path in DASHBOARDS:
        for p in _panels(_load(path)):
            for t in p.get("targets", []):
                for name in re.findall(r"\b((?:dpjob|controller_runtime|workqueue|rest_client)_\w+|up)\s*[{\[(]",
                                       t["expr"]):
                    base = name
                    for s in suffixes:
                        if name.endswith(s) and name[: -len(s)] in known:
                            base = name[: -len(s)]
                            break
                    assert base in known or name in known, f"{path.name}: {p['title']}: unknown metric {name}"


# ---- the chart ships them (helm template) ------------------------------------------------


@needs_helm
def test_dashboard_configmaps():
    objs = render(set_=["dashboards.namespace=monitoring"])
    cms = [o for o in by_kind(objs, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]]
    assert len(cms) == 2
    for cm in cms:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "dpjob"}
        assert cm["metadata"]["namespace"] == "monitoring"
        ((key, text),) = cm["data"].items()
        assert key in {p.name for p in DASHBOARDS}
        assert json.loads(text) == json.loads((CHART / "dashboards" / key).read_text())
    assert not [o for o in by_kind(render(set_=["dashboards.enabled=false"]), "ConfigMap")
                if "grafana_dashboard" in o["metadata"]["labels"]]
