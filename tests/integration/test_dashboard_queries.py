"""A real Prometheus 3 (built from Go modules by devcluster/build.sh) scraping in-process operator and
trainer metric endpoints, so that every dashboard query is proven to be valid PromQL that returns
data. Needs the Prometheus binary, not the cluster."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from devcluster import prometheus as prom
from tests.support.ports import free_port
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def test_every_dashboard_query_returns_data_from_real_prometheus(tmp_path):
    """Synthetic but real exporters: the operator's own metric objects and two TrainerMetrics."""
    from prometheus_client import CollectorRegistry, start_http_server

    from dpjob_operator import metrics as om
    from dpjob_trainer.metrics import TrainerMetrics
    from dpjob_trainer.stragglers import StepTimes

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
    op_port = free_port()
    op_server, _ = start_http_server(op_port, addr="127.0.0.1", registry=registry)
    trainers = []
    trainer_ports = [free_port(), free_port()]
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
            om.REQUEST_DURATION.labels("POST").observe(0.02)
            om.PODS_CREATED.inc(2)
            om.TIME_TO_CREATED.observe(0.2)
            om.TIME_TO_RUNNING.observe(1.5)
            om.RESTART_DETECT.labels("InPlace").observe(0.5)  # status.goodput's restart entries
            om.RESTART_RECOVER.labels("InPlace").observe(6.0)
            for rank, m in enumerate(trainers):
                m.observe_step(duration=0.05 + 0.01 * rank, samples=32, data_wait=0.005, comm_exposed=0.01,
                               loss=2.0 / step, learning_rate=0.1, grad_norm=1.0, epoch=0, timestamp=time.time(),
                               step=step, global_samples=64)
            # Rank 0 of a two-rank job also serves the straggler gauges (trainer stragglers.py).
            trainers[0].set_step_times(StepTimes(slowest_rank=1, slowest_seconds=0.06, median_seconds=0.055,
                                                 straggler=None))
            stop.wait(0.2)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    proc = prom.start_prometheus(free_port(), [f"127.0.0.1:{op_port}"], [f"127.0.0.1:{p}" for p in trainer_ports],
                                 job_name="demo", namespace="ns", workdir=tmp_path / "prom")
    try:
        prom.wait_ready(proc.url, proc=proc)
        prom.wait_targets_up(proc.url, 3, timeout=30)
        # rate() over 30s needs two samples per series: a few 1s scrapes.
        queries = prom.dashboard_queries(values={"namespace": "ns", "job": "demo", "operator": prom.OPERATOR_JOB})
        empty = queries

        def every_query_has_data() -> bool:
            nonlocal empty
            empty = [(d, t, e) for d, t, e in queries if not prom.query(proc.url, e)]
            return not empty

        with contextlib.suppress(AssertionError):  # the assert below names the queries still empty
            wait_until(every_query_has_data, timeout=30, interval=1, what="data for every dashboard query")
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
