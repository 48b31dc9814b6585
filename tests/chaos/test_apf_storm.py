"""Chaos drill: a 429 storm from a tight API Priority and Fairness limit.

The operator runs as a ServiceAccount (system:masters, the tests' usual identity, is exempt from
APF) whose requests a FlowSchema sends to a priority level of a few seats that rejects at once
instead of queueing; its Lease requests alone go to the built-in ``leader-election`` level, by the
chart's own FlowSchema (``leaderElection.priorityLevel``), rendered for this ServiceAccount. Ten
8-rank jobs applied together then meet 429s on every burst. The work must converge (every job
Running, every rank created once) with retries that stay bounded: the operator honours
Retry-After and backs off per job instead of hammering.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl
from tests.support.helm import render, service_account_kubeconfig
from tests.support.operator import OperatorProcess, metric_sum
from tests.support.paths import DEVCLUSTER

pytestmark = pytest.mark.chaos

JOBS, RANKS = 10, 8
LEVEL = "dpjob-storm"


def _chart_lease_schema(lease_namespace: str, sa: str) -> list[dict]:
    """The chart's FlowSchema for the Lease requests of ServiceAccount ``sa`` (in the Lease's
    namespace, as in an install), matched before the storm's own schema (precedence 50)."""
    return render("storm", lease_namespace,
                  set_=[f"serviceAccount.name={sa}", "leaderElection.flowSchemaPrecedence=40"],
                  extra=["--show-only", "templates/leader-election-flowschema.yaml"])


def _apf_objects(namespace: str, sa: str) -> list[dict]:
    level = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
             "metadata": {"name": LEVEL},
             "spec": {"type": "Limited", "limited": {
                 "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
                 "limitResponse": {"type": "Reject"}}}}
    schema = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": LEVEL},
              "spec": {"priorityLevelConfiguration": {"name": LEVEL}, "matchingPrecedence": 50,
                       "distinguisherMethod": {"type": "ByUser"},
                       "rules": [{"subjects": [{"kind": "ServiceAccount",
                                                "serviceAccount": {"name": sa, "namespace": namespace}}],
                                  "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                     "namespaces": ["*"], "clusterScope": True}],
                                  "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}
    return [level, schema]


def _rejected(metrics: str) -> float:
    """The API server's count of requests it refused at our priority level."""
    return metric_sum(metrics, "apiserver_flowcontrol_rejected_requests_total", priority_level=LEVEL)


@pytest.fixture()
def throttled_operator(namespace, operator, tmp_path: Path) -> Iterator[OperatorProcess]:
    sa, home = "dpjob-storm", operator.lease_key[0]  # the ServiceAccount lives where the Lease does, as installed
    kubectl("create", "serviceaccount", sa, "-n", home)
    kubectl("create", "clusterrolebinding", f"{sa}-{namespace}", "--clusterrole=cluster-admin",
            f"--serviceaccount={home}:{sa}")
    objects = yaml.safe_dump_all(_apf_objects(home, sa) + _chart_lease_schema(home, sa))
    kubectl("apply", "-f", "-", stdin=objects)
    kc = service_account_kubeconfig(home, sa, tmp_path / "storm.kubeconfig")
    operator.stop()  # the shared operator releases the Lease; the throttled one takes it
    storm = OperatorProcess(kc, DEVCLUSTER / "logs" / "operator-storm.log")
    storm.start()
    yield storm
    storm.stop()
    kubectl("delete", "-f", "-", stdin=objects, check=False)
    kubectl("delete", "clusterrolebinding", f"{sa}-{namespace}", check=False)
    kubectl("delete", "serviceaccount", sa, "-n", home, check=False)


def test_a_429_storm_converges_with_bounded_retries(api, core, namespace, throttled_operator):
    rejected_before = _rejected(kubectl("get", "--raw", "/metrics").stdout)
    for i in range(JOBS):
        dpj.create(api, namespace, JobBuilder(f"storm-{i}").replicas(RANKS).obj())
    for i in range(JOBS):
        st = dpj.wait_phase(api, namespace, f"storm-{i}", "Running", timeout=240)
        assert st["restarts"] == 0
        pods = dpj.rank_pods(core, namespace, f"storm-{i}")
        assert sorted(p.metadata.name for p in pods) == sorted(f"storm-{i}-rank-{r}" for r in range(RANKS))
    rejected = _rejected(kubectl("get", "--raw", "/metrics").stdout) - rejected_before
    ours = throttled_operator.metrics()
    throttled = metric_sum(ours, "rest_client_requests_total", code="429")
    created = metric_sum(ours, "dpjob_pods_created_total")
    print(f"APF rejected {rejected:.0f} requests; the operator saw {throttled:.0f} 429s; created {created:.0f} pods")
    assert rejected > 0 and throttled > 0, "no storm: the priority level never rejected the operator"
    assert created == JOBS * RANKS, "every rank created exactly once"
    # Bounded: Retry-After and per-job backoff, not a retry loop; a generous ceiling per object made.
    assert throttled <= 20 * (JOBS * RANKS + JOBS), f"{throttled:.0f} throttled requests for {JOBS * RANKS} pods"
