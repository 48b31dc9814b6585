"""devcluster/prometheus.py: variable substitution and config rendering. That every dashboard query
returns data from a real Prometheus is tests/integration/test_dashboard_queries.py."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_module():
    spec = importlib.util.spec_from_file_location("dpjob_devcluster_prometheus", REPO / "devcluster" / "prometheus.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


prom = _load_module()


# ---- substitution (unit) -------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("expr,values,expected", [
    ('rate(x{namespace=~"$namespace", dpjob_job=~"$job"}[$__rate_interval])', {},
     'rate(x{namespace=~".*", dpjob_job=~".*"}[30s])'),
    ('rate(x{namespace=~"$namespace", dpjob_job=~"$job"}[$__rate_interval])', {"namespace": "ns1", "job": "demo"},
     'rate(x{namespace=~"ns1", dpjob_job=~"demo"}[30s])'),
    ('avg_over_time(x[$__interval]) + y{a=~"${job}"}', {"job": "j"}, 'avg_over_time(x[5s]) + y{a=~"j"}'),
    ('x{a=~"${job:regex}"}[$__range]', {}, 'x{a=~".*"}[5m]'),
    ('sum(rate(x[$__rate_interval]))', {"__rate_interval": "1m"}, 'sum(rate(x[1m]))'),
    ('up{job=~"$operator"}', {}, 'up{job=~".*"}'),
    ('no_variables_here{a="b"}', {"job": "x"}, 'no_variables_here{a="b"}'),
])
def test_substitute(expr, values, expected):
    assert prom.substitute(expr, values) == expected


@pytest.mark.unit
def test_substitute_does_not_confuse_prefixes():
    # $job must not eat the start of $jobs, and $__interval must not match inside $__interval_ms.
    assert prom.substitute("$jobs $job", {"job": "a", "jobs": "b"}) == "b a"
    assert prom.substitute("$__interval_ms $__interval") == "5000 5s"


@pytest.mark.unit
def test_dashboard_queries_cover_every_panel_and_leave_no_variable():
    raw = prom.dashboard_queries(substituted=False)
    done = prom.dashboard_queries(values={"namespace": "ns", "job": "demo"})
    assert len(raw) == len(done) >= 30
    assert {d for d, _, _ in done} == {"dpjob-training.json", "dpjob-operator.json"}
    n_targets = 0
    for path in (REPO / "helm" / "dpjob-operator" / "dashboards").glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            n_targets += len(panel.get("targets") or [])
    assert len(done) == n_targets
    for _, title, expr in done:
        assert "$" not in expr, (title, expr)
    assert any('dpjob_job=~"demo"' in e for _, _, e in done)
    assert any('namespace=~"ns"' in e for _, _, e in done)


@pytest.mark.unit
def test_render_config_labels_trainers_like_the_podmonitor():
    cfg = json.loads(prom.render_config(["127.0.0.1:8080"], ["127.0.0.1:9090", "127.0.0.1:9091"],
                                        job_name="demo", namespace="ns"))
    assert cfg["global"]["scrape_interval"] == "1s"
    op, tr = cfg["scrape_configs"]
    assert op["job_name"] == prom.OPERATOR_JOB and op["static_configs"] == [{"targets": ["127.0.0.1:8080"]}]
    assert [c["labels"]["dpjob_rank"] for c in tr["static_configs"]] == ["0", "1"]
    assert all(c["labels"]["dpjob_job"] == "demo" and c["labels"]["namespace"] == "ns" for c in tr["static_configs"])
