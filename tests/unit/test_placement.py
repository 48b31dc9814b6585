"""Restart placement: the next gang avoids the node a failed rank left NotReady or tainted."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dpjob_operator.api.observed import NodeView
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.tolerations import tolerates, untolerated
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.reconcile.actions import CreatePods
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
RUNNING = {"phase": "Running", "reason": "AllRanksRunning", "restarts": 0, "failureRestarts": 0}


def fail_rank_1(health: dict[str, str], taints: dict[str, tuple[str, ...]] | None = None):
    pods = [pod(0, node="n0"), pod(1, "Failed", node="n1", exit_code=1)]
    return plan_job(JobBuilder().job(), RUNNING, pods, NOW, DEFAULT_POOLS["cpu"],
                    nodes=NodeView(120, health, taints or {}))


CASES = [
    ("node NotReady", {"n1": "NotReady"}, {}, ["n1"], "is NotReady"),
    ("node gone", {"n1": "Gone"}, {}, ["n1"], "is Gone"),
    ("node tainted by a health tool", {"n1": "Ready"}, {"n1": ("gpu.health/xid-79",)}, ["n1"],
     "tainted gpu.health/xid-79"),
    ("healthy node: no avoidance", {"n1": "Ready"}, {}, None, None),
    ("node unknown: no avoidance", {}, {}, None, None),
]


@pytest.mark.parametrize(("health", "taints", "avoided", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_restart_after_a_failure_on_a_bad_node_avoids_it_for_the_next_gang(health, taints, avoided, words):
    p = fail_rank_1(health, taints)
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    if avoided is None:
        assert "avoidNodes" not in p.status
        return
    assert p.status["avoidNodes"]["nodes"] == avoided and p.status["avoidNodes"]["restart"] == 1
    assert words in p.status["avoidNodes"]["reason"] and "the next gang avoids it" in p.status["message"]
    # The next pass creates generation 1 with the avoidance; a later generation would not get it.
    nxt = plan_job(JobBuilder().job(), p.status, [], NOW, DEFAULT_POOLS["cpu"])
    creates = [a for a in nxt.actions if isinstance(a, CreatePods)]
    assert creates and creates[0].restart == 1 and creates[0].avoid_nodes == tuple(avoided)


def test_the_avoidance_is_anded_into_every_node_selector_term_of_the_users_affinity():
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
             {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]
    job = JobBuilder().set("template.spec.affinity", {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}).job()
    spec = build_rank_pod(job, 0, 1, DEFAULT_POOLS["cpu"], avoid_nodes=("n1",))["spec"]
    got = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    not_in = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n1"]}
    assert len(got) == 2 and all(not_in in t["matchExpressions"] for t in got)
    assert got[0]["matchExpressions"][0]["values"] == ["a"]
    plain = build_rank_pod(JobBuilder().job(), 0, 1, DEFAULT_POOLS["cpu"], avoid_nodes=("n1", "n2"))["spec"]
    assert plain["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{**not_in, "values": ["n1", "n2"]}]}]}
    assert "affinity" not in build_rank_pod(JobBuilder().job(), 0, 1, DEFAULT_POOLS["cpu"])["spec"]


TOLERATION_CASES = [
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Equal", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ({"key": "k", "operator": "Equal", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"operator": "Exists"}, {"key": "anything", "effect": "NoSchedule"}, True),
    ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
]


@pytest.mark.parametrize(("toleration", "taint", "expected"), TOLERATION_CASES)
def test_tolerations_follow_the_schedulers_rule(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


def test_only_untolerated_noschedule_and_noexecute_taints_count():
    taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
              {"key": "gpu.health/xid-79", "effect": "NoExecute"},
              {"key": "soft", "effect": "PreferNoSchedule"}]
    pool = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    assert untolerated(taints, pool) == ["gpu.health/xid-79"]


def test_nodes_are_read_only_for_stuck_pods_and_for_failed_ranks_of_a_job_that_can_still_restart():
    from dpjob_operator.api.timestamps import iso
    from dpjob_operator.controller.observer import nodes_to_judge

    pods = [pod(0, node="n0"), pod(1, "Failed", node="n1", exit_code=1),
            pod(2, "Running", node="n2", deleting=True, deletion_timestamp=iso(NOW)),
            pod(3, "Failed", node="n3", restart=7)]
    assert nodes_to_judge(pods, 0, NOW, 120) == {"n1"}  # n2 not stuck yet, n3 of another gang
    later = NOW.replace(minute=5)
    assert nodes_to_judge(pods, 0, later, 120) == {"n1", "n2"}
    assert nodes_to_judge(pods, 0, later, 120, finished=True) == {"n2"}  # a finished job: stuck pods only
