"""The chart's ServiceMonitor and PodMonitor made real by the Prometheus Operator: a user of
kube-prometheus-stack sets ``serviceMonitor.enabled``, ``podMonitor.enabled`` and the ``release``
label, and the operator's Prometheus (a StatefulSet on the real node) scrapes the operator pod and
the rank containers with the labels the dashboards filter on."""

from __future__ import annotations

import pytest

from devcluster import monitoring, stack
from devcluster import prometheus as promsupport
from tests.e2e.test_training_e2e import trainer_job
from tests.support import cluster as dpj
from tests.support.waits import wait_until

pytestmark = pytest.mark.e2e

MONITORS = {"enabled": True, "additionalLabels": monitoring.RELEASE_LABEL, "interval": "2s", "scrapeTimeout": "2s"}


SERVICE_POOL = f"serviceMonitor/{stack.OPERATOR_NAMESPACE}/{stack.OPERATOR_DEPLOYMENT}/0"
POD_POOL = f"podMonitor/{stack.OPERATOR_NAMESPACE}/{stack.OPERATOR_DEPLOYMENT}-trainers/0"


def _loaded_scrape_jobs(url: str) -> str:
    try:
        return promsupport.config(url)
    except (OSError, ValueError):
        return ""


@pytest.fixture()
def monitored_operator(operator_pod):
    url = monitoring.install()
    stack.install_operator(extra_values={"serviceMonitor": dict(MONITORS), "podMonitor": dict(MONITORS)})
    # The Prometheus Operator writes the new scrape config into a Secret; the kubelet brings a
    # changed Secret volume to the pod on its periodic sync (10 s in the dev cluster, a minute by
    # default), then the reloader reloads Prometheus. Start the job only once both monitors are loaded.
    wait_until(lambda: all(pool in _loaded_scrape_jobs(url) for pool in (SERVICE_POOL, POD_POOL)), timeout=240,
               interval=2, what="Prometheus to load the chart's monitors")
    yield url
    stack.install_operator()  # the release as the other tests know it: no monitors


def test_the_prometheus_operator_scrapes_the_operator_and_the_ranks_through_the_charts_monitors(
        api, namespace, monitored_operator):
    url = monitored_operator
    name = "watched"
    dpj.create(api, namespace, trainer_job(name, ["--task", "mlp", "--steps", "300", "--metrics-linger", "20"]))

    series = wait_until(lambda: (lambda r: r if len(r) == 2 else None)(
        promsupport.query(url, f'max_over_time(dpjob_trainer_steps_total{{namespace="{namespace}"}}[5m])')),
        timeout=120, interval=1, what="both ranks' series in the operator's Prometheus")
    assert {(s["metric"]["dpjob_job"], s["metric"]["dpjob_rank"]) for s in series} == {(name, "0"), (name, "1")}
    assert {s["metric"]["pod"] for s in series} == {f"{name}-rank-0", f"{name}-rank-1"}

    pools = {t["scrapePool"] for t in promsupport.targets(url)}
    assert {POD_POOL, SERVICE_POOL} <= pools, pools
    operator_series = wait_until(lambda: promsupport.query(
        url, f'dpjob_jobs{{namespace="{stack.OPERATOR_NAMESPACE}"}}'), timeout=60, interval=1,
        what="the operator's own metrics")
    assert {s["metric"]["job"] for s in operator_series}, operator_series
    dpj.wait_phase(api, namespace, name, "Succeeded", timeout=180)
