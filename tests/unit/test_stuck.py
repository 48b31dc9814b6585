"""Ranks stuck Terminating: reported with their node, force-deleted only when the node is down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.observed import NodeView
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile.actions import DeletePods
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
AFTER = 120.0


def deleting(index: int, seconds_past_deadline: float, node: str = "n1", restart: int = 0):
    return pod(index, "Running", restart=restart, node=node, deleting=True,
               deletion_timestamp=iso(NOW - timedelta(seconds=seconds_past_deadline)))


def plan(pods, health: dict[str, str] | None, status: dict | None = None, now: datetime = NOW):
    nodes = None if health is None else NodeView(AFTER, health)
    st = status if status is not None else {"phase": "Restarting", "restarts": 1, "failureRestarts": 1}
    return plan_job(JobBuilder().job(), st, pods, now, DEFAULT_POOLS["cpu"], nodes=nodes)


def cond(p) -> dict | None:
    return next((c for c in p.status.get("conditions", []) if c["type"] == "StuckTerminating"), None)


def forced(p) -> list[str]:
    return [n for a in p.actions if isinstance(a, DeletePods) and a.force for n in a.names]


CASES = [
    # (name, seconds past the deadline, node health, condition reason or None, forced)
    ("not yet stuck", 60, {"n1": "NotReady"}, None, []),
    ("stuck on a NotReady node", 130, {"n1": "NotReady"}, "NodeNotReady", ["train-rank-1"]),
    ("stuck on a node that is gone", 130, {"n1": "Gone"}, "NodeNotReady", ["train-rank-1"]),
    ("stuck on a Ready node: reported only", 130, {"n1": "Ready"}, "PodStuckTerminating", []),
    ("stuck, node unknown (no RBAC): reported only", 130, {"n1": "Unknown"}, "PodStuckTerminating", []),
    ("stuck, node not read at all", 130, {}, "PodStuckTerminating", []),
]


@pytest.mark.parametrize(("late", "health", "reason", "force"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_rank_stuck_terminating_is_named_and_forced_only_on_a_down_node(late, health, reason, force):
    p = plan([deleting(1, late)], health)
    c = cond(p)
    if reason is None:
        assert c is None and not forced(p)
        assert p.wake_after is not None and p.wake_after <= AFTER - late + 0.01  # woken when it would be stuck
        return
    assert c["status"] == "True" and c["reason"] == reason
    assert "train-rank-1" in c["message"] and "node n1" in c["message"]
    assert forced(p) == force
    assert [e.reason for e in p.events if e.reason == "StuckTerminating"] == ["StuckTerminating"]


def test_the_event_comes_once_and_the_condition_clears():
    stuck = deleting(1, 130)
    first = plan([stuck], {"n1": "Ready"})
    again = plan([stuck], {"n1": "Ready"}, first.status, NOW + timedelta(seconds=10))
    assert "StuckTerminating" not in [e.reason for e in again.events]
    cleared = plan([], {}, again.status)
    c = cond(cleared)
    assert c["status"] == "False" and c["reason"] == "Cleared"


def test_without_a_node_view_nothing_is_judged():
    assert cond(plan([deleting(1, 1000)], None)) is None


def test_the_deletion_deadline_is_observed_from_the_pod():
    from dpjob_operator.api.observed import observe_pod

    raw = {"metadata": {"name": "train-rank-0", "labels": {"dpjob.io/rank": "0"},
                        "deletionTimestamp": "2026-11-24T12:00:00Z"}, "status": {"phase": "Running"}}
    seen = observe_pod(raw)
    assert seen.deleting and seen.deletion_timestamp == "2026-11-24T12:00:00Z"
