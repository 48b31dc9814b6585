"""Node loss: a node gone, or NotReady under the lifecycle controller's NoExecute taint, under the
current gang restarts it elsewhere, uncharged; the node watch wakes the jobs with a pod on a node
whose health changes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dpjob_operator.api.observed import NodeView
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.k8s.nodecache import NodeCache, signature
from dpjob_operator.k8s.nodes import state_of
from dpjob_operator.k8s.podcache import PodCache
from dpjob_operator.reconcile.actions import CreatePods, DeletePods
from dpjob_operator.reconcile.node_loss import find_node_loss, why_lost
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
UNREACHABLE, NOT_READY = "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"
RUNNING = {"phase": "Running", "reason": "AllRanksRunning", "restarts": 0, "failureRestarts": 0}


def view(health: dict[str, str], no_execute: dict[str, tuple[str, ...]] | None = None) -> NodeView:
    return NodeView(120, health, {}, no_execute or {})


# (name, health, NoExecute taint keys, lost?)
NODE_CASES = [
    ("gone", "Gone", (), True),
    ("NotReady, tainted unreachable", "NotReady", (UNREACHABLE,), True),
    ("NotReady, tainted not-ready: a kubelet that still reports", "NotReady", (NOT_READY,), False),
    ("NotReady for a moment: no taint yet", "NotReady", (), False),
    ("NotReady, only a health tool's NoExecute taint", "NotReady", ("gpu.health/xid-79",), False),
    ("Ready, a stale unreachable taint", "Ready", (UNREACHABLE,), False),
    ("not readable (RBAC)", "Unknown", (UNREACHABLE,), False),
]


@pytest.mark.parametrize(("health", "taints", "lost"), [c[1:] for c in NODE_CASES], ids=[c[0] for c in NODE_CASES])
def test_a_node_is_lost_when_gone_or_given_up_by_the_control_plane(health, taints, lost):
    nodes = view({"n1": health}, {"n1": taints})
    assert (why_lost(nodes, "n1") is not None) is lost
    loss = find_node_loss([pod(0, node="n0"), pod(1, node="n1")], 0, "uid-train", 2, nodes)
    assert (loss is not None) is lost
    if lost:
        assert loss is not None and loss.nodes == ("n1",) and loss.ranks == (1,) and loss.pods == ("train-rank-1",)


def test_a_node_the_view_does_not_hold_is_not_lost():
    assert why_lost(view({}), "n1") is None
    assert find_node_loss([pod(1, node="n1")], 0, "uid-train", 2, None) is None


# (name, the rank-1 pod on the gone node n1, judged?)
POD_CASES = [
    ("Running", pod(1, node="n1"), True),
    ("Pending and bound", pod(1, "Pending", node="n1"), True),
    ("Pending, not bound", pod(1, "Pending", node=None), False),
    ("being deleted", pod(1, node="n1", deleting=True), False),
    ("of another gang generation", pod(1, node="n1", restart=3), False),
    ("not the job's", pod(1, node="n1", owner_uid="someone-else"), False),
    ("Failed (the failure policy's)", pod(1, "Failed", node="n1", exit_code=1), False),
    ("Succeeded", pod(1, "Succeeded", node="n1"), False),
    ("above spec.replicas", pod(2, node="n1"), False),
]


@pytest.mark.parametrize(("rank1", "judged"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES])
def test_only_the_current_gangs_live_ranks_are_judged(rank1, judged):
    loss = find_node_loss([pod(0, node="n0"), rank1], 0, "uid-train", 2, view({"n1": "Gone"}))
    assert (loss is not None) is judged


def test_the_decision_is_sorted_and_names_every_pod_on_the_lost_nodes():
    pods = [pod(3, node="b"), pod(0, node="a"), pod(2, node="c"), pod(1, node="b"),
            pod(4, node="b", deleting=True)]  # a rank 4 of an elastic scale-down, already going
    nodes = view({"a": "Ready", "b": "Gone", "c": "NotReady"}, {"c": (UNREACHABLE,)})
    loss = find_node_loss(pods, 0, "uid-train", 4, nodes)
    assert loss is not None
    assert loss.nodes == ("b", "c") and loss.ranks == (1, 2, 3)
    assert loss.pods == ("train-rank-1", "train-rank-2", "train-rank-3", "train-rank-4")
    assert loss.describe() == ("node b is gone (its Node object was deleted); node c is NotReady and tainted "
                               f"{UNREACHABLE}:NoExecute: rank(s) 1, 2, 3 lost with them")


# ---- the planner ---------------------------------------------------------------------------


def plan(status: dict[str, Any], pods, nodes: NodeView | None, builder: JobBuilder | None = None):
    return plan_job((builder or JobBuilder()).job(), status, pods, NOW, DEFAULT_POOLS["cpu"], nodes=nodes)


def cond(p, type_: str = "NodeLost") -> dict[str, Any] | None:
    return next((c for c in p.status.get("conditions", []) if c["type"] == type_), None)


def test_a_running_gang_on_a_lost_node_restarts_elsewhere_uncharged_and_says_so():
    p = plan(RUNNING, [pod(0, node="n0"), pod(1, node="n1")], view({"n0": "Ready", "n1": "Gone"}))
    st = p.status
    assert st["phase"] == "Restarting" and st["reason"] == "NodeLost"
    assert st["restarts"] == 1 and st["failureRestarts"] == 0 and st["restartsByReason"] == {"NodeLost": 1}
    assert st["avoidNodes"]["restart"] == 1 and st["avoidNodes"]["nodes"] == ["n1"]
    c = cond(p)
    assert c is not None and (c["status"], c["reason"]) == ("True", "NodeLost")
    assert "node n1" in c["message"] and "rank(s) 1" in c["message"]
    assert st["lastFailure"]["reason"] == "NodeLost" and st["lastFailure"]["node"] == "n1"
    lost = [e for e in p.events if e.reason == "NodeLost"]
    assert len(lost) == 1 and lost[0].type == "Warning" and "node n1" in lost[0].message
    assert "not charged to backoffLimit" in next(e.message for e in p.events if e.reason == "GangRestart")
    deletes = {a.force: a.names for a in p.actions if isinstance(a, DeletePods)}
    assert deletes == {False: ("train-rank-0",), True: ("train-rank-1",)}  # no kubelet will confirm rank 1's


def test_a_spent_restart_budget_does_not_stop_a_node_loss_restart():
    spent = {**RUNNING, "restarts": 2, "failureRestarts": 2}
    p = plan(spent, [pod(0, restart=2, node="n1"), pod(1, restart=2, node="n1")], view({"n1": "Gone"}),
             JobBuilder().run_policy(backoffLimit=2))
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 3 and p.status["failureRestarts"] == 2
    assert [a.names for a in p.actions if isinstance(a, DeletePods) and a.force] == [("train-rank-0", "train-rank-1")]


# (name, phase, pods, restart?)
PHASE_CASES = [
    ("Running", "Running", [pod(0, node="n0"), pod(1, node="n1")], True),
    ("Created: a rank bound, not started", "Created", [pod(0, "Pending", node="n0"), pod(1, "Pending", node="n1")],
     True),
    ("Restarting: the new gang's rank landed on it", "Restarting", [pod(0, node="n0"), pod(1, "Pending", node="n1")],
     True),
    ("Succeeded: nothing to restart", "Succeeded", [pod(0, "Succeeded", node="n0"), pod(1, "Succeeded", node="n1")],
     False),
]


@pytest.mark.parametrize(("phase", "pods", "restarts"), [c[1:] for c in PHASE_CASES], ids=[c[0] for c in PHASE_CASES])
def test_a_lost_node_restarts_any_gang_that_is_not_finished(phase, pods, restarts):
    p = plan({**RUNNING, "phase": phase}, pods, view({"n0": "Ready", "n1": "Gone"}))
    assert (p.status["restarts"] == 1) is restarts
    assert (cond(p) is not None) is restarts


def test_without_a_node_view_or_on_healthy_nodes_nothing_happens():
    pods = [pod(0, node="n0"), pod(1, node="n1")]
    for nodes in (None, view({"n0": "Ready", "n1": "NotReady"})):
        p = plan(RUNNING, pods, nodes)
        assert p.status["phase"] == "Running" and p.status["restarts"] == 0 and cond(p) is None
        assert not [a for a in p.actions if isinstance(a, DeletePods)]


def test_the_next_gang_avoids_the_node_and_node_lost_clears_once_it_runs():
    lost = plan(RUNNING, [pod(0, node="n0"), pod(1, node="n1")], view({"n0": "Ready", "n1": "Gone"}))
    create = plan(lost.status, [], view({}))
    creates = [a for a in create.actions if isinstance(a, CreatePods)]
    assert creates and creates[0].restart == 1 and creates[0].avoid_nodes == ("n1",)
    starting = plan(create.status, [pod(0, restart=1, node="n0"), pod(1, "Pending", restart=1, node="n2")],
                    view({"n0": "Ready", "n2": "Ready"}))
    assert starting.status["phase"] == "Restarting" and cond(starting)["status"] == "True"  # type: ignore[index]
    running = plan(starting.status, [pod(0, restart=1, node="n0"), pod(1, restart=1, node="n2")],
                   view({"n0": "Ready", "n2": "Ready"}))
    c = cond(running)
    assert running.status["phase"] == "Running" and c is not None
    assert (c["status"], c["reason"]) == ("False", "NodesHealthy")
    assert (cond(running, "Restarting") or {}).get("reason") == "Recovered"
    assert running.status["failureRestarts"] == 0


# ---- the node watch ------------------------------------------------------------------------


def node(name: str, ready: str = "True", taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": taints or []},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_a_served_node_reads_as_its_health_and_taints():
    assert state_of(node("n1")) == ("Ready", [])
    assert state_of(node("n1", "Unknown"))[0] == "NotReady" and state_of({"metadata": {"name": "n"}})[0] == "NotReady"
    taints = [{"key": UNREACHABLE, "effect": "NoExecute"}, {"key": "x", "effect": "NoSchedule"}]
    assert signature(state_of(node("n1", "Unknown", taints))) == ("NotReady", (UNREACHABLE,))
    assert signature(None) == ("Gone", ())


def test_the_node_watch_calls_back_only_when_health_or_noexecute_taints_change():
    changed: list[str] = []
    cache = NodeCache(kube=Any, on_change=changed.append)  # type: ignore[arg-type]
    cache._relisted(None, [node("n1"), node("n2")])
    assert changed == []  # the first list: nothing was known before
    cache._event("MODIFIED", node("n1", taints=[{"key": "soft", "effect": "NoSchedule"}]))
    assert changed == []  # a NoSchedule taint: no pass
    cache._event("MODIFIED", node("n1", "Unknown"))
    cache._event("MODIFIED", node("n1", "Unknown", [{"key": UNREACHABLE, "effect": "NoExecute"}]))
    cache._event("DELETED", node("n2"))
    assert changed == ["n1", "n1", "n2"]
    cache._relisted(None, [node("n1", "Unknown", [{"key": UNREACHABLE, "effect": "NoExecute"}]), node("n3")])
    assert changed == ["n1", "n1", "n2"]  # n1 as it was, n3 new
    cache._relisted(None, [node("n3")])
    assert changed == ["n1", "n1", "n2", "n1"]  # n1 went while the watch was down


def rank_pod(job: str, rank: int, node_name: str | None) -> dict[str, Any]:
    return {"metadata": {"name": f"{job}-rank-{rank}", "namespace": "ns", "uid": f"{job}-{rank}",
                         "labels": {"dpjob.io/job-name": job, "dpjob.io/rank": str(rank), "dpjob.io/restart": "0"}},
            "spec": {"nodeName": node_name}, "status": {"phase": "Running"}}


def test_a_changed_node_wakes_at_once_every_job_with_a_pod_on_it():
    woken: list[tuple[str, str, bool]] = []
    cache = PodCache(kube=Any, on_change=lambda ns, job, urgent: woken.append((ns, job, urgent)))  # type: ignore[arg-type]
    cache._relisted(None, [rank_pod("a", 0, "n1"), rank_pod("a", 1, "n2"), rank_pod("b", 0, "n1"),
                           rank_pod("c", 0, None)])
    woken.clear()
    assert cache.jobs_on("n1") == [("ns", "a"), ("ns", "b")] and cache.jobs_on("n2") == [("ns", "a")]
    cache.node_changed("n1")
    assert woken == [("ns", "a", True), ("ns", "b", True)]
    assert cache.jobs_on("n9") == []
