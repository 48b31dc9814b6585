"""The per-job NetworkPolicy: who may connect to a job's rank pods (table-driven, no cluster)."""

from __future__ import annotations

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.builders.network_policy import build_network_policy, wants_network_policy
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.config import load_config
from tests.support.builders import JobBuilder

pytestmark = pytest.mark.unit
PROMETHEUS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
RANKS = {"matchLabels": {"dpjob.io/job-name": "train", "app.kubernetes.io/managed-by": "dpjob-operator"}}


@pytest.mark.parametrize("builder, metrics_from, metrics_rule", [
    (JobBuilder(), [], None),  # only the job's own pods
    (JobBuilder(), [PROMETHEUS], {"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": 9090}]}),
    (JobBuilder().procs(8), [PROMETHEUS],  # one metrics endpoint per local rank: a port range
     {"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": 9090, "endPort": 9097}]}),
    (JobBuilder().set("template.spec.containers", [{"name": "trainer", "image": "x",
                                                   "ports": [{"name": "metrics", "containerPort": 8000}]}]),
     [PROMETHEUS], {"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": 8000}]}),
], ids=["peers-only", "prometheus", "eight-local-ranks", "template-metrics-port"])
def test_the_policy_admits_the_jobs_own_pods_and_the_scrapers_on_the_metrics_ports(builder, metrics_from,
                                                                                   metrics_rule):
    job = builder.job()
    policy = build_network_policy(job, metrics_from)
    assert policy["metadata"]["name"] == "train" and policy["metadata"]["ownerReferences"] == [job.owner_reference]
    spec = policy["spec"]
    assert spec["podSelector"] == RANKS and spec["policyTypes"] == ["Ingress"], "egress must stay open"
    assert spec["ingress"][0] == {"from": [{"podSelector": RANKS}]}, "peers of the job reach every port"
    assert spec["ingress"][1:] == ([metrics_rule] if metrics_rule else [])


@pytest.mark.parametrize("isolation, enabled, want", [
    ("Job", True, True), ("None", True, False), ("Job", False, False)])
def test_a_job_opts_out_and_the_operator_can_turn_policies_off(isolation, enabled, want):
    assert wants_network_policy(JobBuilder().set("isolation", isolation).job(), enabled) is want


def test_the_operator_config_takes_the_switch_and_the_scrapers(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"networkPolicy": "disabled", "networkPolicyMetricsFrom": [{"podSelector": {}}]}')
    cfg = load_config(str(path), environ={})
    assert cfg.network_policy == "disabled" and cfg.network_policy_metrics_from == ({"podSelector": {}},)
    assert load_config(None, environ={}).network_policy == "enabled"
    with pytest.raises(ValueError, match="networkPolicy must be one of enabled, disabled"):
        load_config(None, environ={"DPJOB_NETWORK_POLICY": "on"})


@pytest.mark.parametrize("template_token, mounted", [(None, False), (True, True), (False, False)])
def test_rank_pods_get_no_service_account_token_unless_the_template_asks(template_token, mounted):
    builder = JobBuilder()
    if template_token is not None:
        builder.set("template.spec.automountServiceAccountToken", template_token)
    pod = build_rank_pod(builder.job(), 0, 0, DEFAULT_POOLS["cpu"])
    assert pod["spec"]["automountServiceAccountToken"] is mounted
