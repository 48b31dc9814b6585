"""devcluster/prometheus.py: variable substitution and config rendering (unit), and a real
Prometheus 3 (built from Go modules by devcluster/build.sh) scraping in-process operator and trainer metric endpoints so that every
dashboard query is proven to be valid PromQL that returns data (integration; no cluster)."""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import threading
import time
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


# ---- a real Prometheus (integration, no cluster) -----------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_every_dashboard_query_returns_data_from_real_prometheus(tmp_path):
    """Synthetic but real exporters: the operator's own metric objects and two TrainerMetrics."""
    from prometheus_client import CollectorRegistry, start_http_server

    from dpjob_operator import metrics as om
    from dpjob_trainer.metrics import TrainerMetrics

    # The operator's metric objects, exercised the way the controller and client do. Served from a
    # private registry (the global one minus any dpjob_jobs collector another test's controller
    # left registered, plus our own), so this test neither depends on nor changes global state.
    class OperatorMetrics:
        def collect(self):
            for family in om.REGISTRY.collect():
                if family.name != "dpjob_jobs":
                    yield family

        def describe(self):
            return []

    registry = CollectorRegistry(auto_describe=True)
    registry.register(OperatorMetrics())
    registry.register(om.JobsByPhase(lambda: ["Running", "Succeeded"]))
    registry.register(om.JobsUnschedulable(lambda: []))
    op_port = _free_port()
    op_server, _ = start_http_server(op_port, addr="127.0.0.1", registry=registry)
    trainers = []
    trainer_ports = [_free_port(), _free_port()]
    for rank, port in enumerate(trainer_ports):
        m = TrainerMetrics()
        m.serve(port, addr="127.0.0.1")
        m.set_info(world_size="2", backend="gloo", torch_version="test", task="synthetic", rank=str(rank))
        trainers.append(m)

    stop = threading.Event()

    def drive():
        step = 0
        while not stop.is_set():
            step += 1
            om.WORKQUEUE_ADDS.labels(om.CONTROLLER).inc()
            om.WORKQUEUE_DEPTH.labels(om.CONTROLLER).set(step % 3)
            om.RECONCILE_TOTAL.labels(om.CONTROLLER, "success").inc()
            om.RECONCILE_TIME.labels(om.CONTROLLER).observe(0.01)
            om.RATE_LIMITER_WAIT.labels("POST").observe(0.0)
            om.REST_REQUESTS.labels("200", "POST").inc()
            om.PODS_CREATED.inc(2)
            om.TIME_TO_CREATED.observe(0.2)
            om.TIME_TO_RUNNING.observe(1.5)
            for rank, m in enumerate(trainers):
                m.observe_step(duration=0.05 + 0.01 * rank, samples=32, data_wait=0.005, comm_exposed=0.01,
                               loss=2.0 / step, learning_rate=0.1, grad_norm=1.0, epoch=0, timestamp=time.time())
            stop.wait(0.2)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    proc = prom.start_prometheus(_free_port(), [f"127.0.0.1:{op_port}"], [f"127.0.0.1:{p}" for p in trainer_ports],
                                 job_name="demo", namespace="ns", workdir=tmp_path / "prom")
    try:
        prom.wait_ready(proc.url, proc=proc)
        prom.wait_targets_up(proc.url, 3, timeout=30)
        # rate() over 30s needs two samples per series: a few 1s scrapes.
        deadline = time.monotonic() + 30
        queries = prom.dashboard_queries(values={"namespace": "ns", "job": "demo", "operator": prom.OPERATOR_JOB})
        empty = queries
        while time.monotonic() < deadline:
            empty = [(d, t, e) for d, t, e in queries if not prom.query(proc.url, e)]
            if not empty:
                break
            time.sleep(1)
        assert not empty, "queries without data:\n" + "\n".join(f"{d}: {t}: {e}" for d, t, e in empty)
        # The template variables' label_values() sources exist too.
        assert prom.query(proc.url, 'count by (namespace, dpjob_job) (dpjob_trainer_info)')
        assert prom.query(proc.url, 'count by (job) (dpjob_jobs)')[0]["metric"]["job"] == prom.OPERATOR_JOB
        # A PromQL error is an error, not "no data".
        with pytest.raises(ValueError):
            prom.query(proc.url, "sum(rate(x[5m])")
    finally:
        stop.set()
        driver.join(5)
        prom.stop(proc)
        op_server.shutdown()
        for m in trainers:
            m.close()
