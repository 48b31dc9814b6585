"""Why pending: the Waiting condition aggregates every reason the ranks are not all running."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dpjob_operator.api.observed import observe_pod
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
PULL = "ImagePullBackOff: Back-off pulling image \"ghcr.io/typo/trainer:cpu\""
CONFIG = "CreateContainerConfigError: configmap \"settings\" not found"


def plan(pods, status=None, builder=None):
    return plan_job((builder or JobBuilder()).job(), status or {}, pods, NOW, DEFAULT_POOLS["cpu"])


def waiting(p) -> dict | None:
    return next((c for c in p.status.get("conditions", []) if c["type"] == "Waiting"), None)


CASES = [
    # (name, pods, status, expected reason or None for False/Running, words in the message)
    ("nothing created yet", [], {}, "Starting", ["0/2 rank(s) running"]),
    ("an image cannot be pulled", [pod(0, "Pending", waiting=PULL), pod(1, "Pending")], {}, "ImagePullError",
     ["rank 0", "train-rank-0", "ghcr.io/typo/trainer:cpu"]),
    ("a missing configmap key", [pod(0, "Running"), pod(1, "Pending", waiting=CONFIG)], {}, "ContainerConfigError",
     ["rank 1", "configmap \"settings\" not found"]),
    ("the image error comes before the config error",
     [pod(0, "Pending", waiting=CONFIG), pod(1, "Pending", waiting=PULL)], {}, "ImagePullError", ["rank 1"]),
    ("the scheduler's verdict",
     [pod(0, "Pending", node=None, unschedulable="0/4 nodes are available: Insufficient cpu"), pod(1, "Running")],
     {}, "Unschedulable", ["Insufficient cpu"]),
    ("merely starting", [pod(0, "Pending", waiting="ContainerCreating"), pod(1, "Running")], {}, "Starting",
     ["1/2 rank(s) running", "ContainerCreating"]),
    ("all running", [pod(0), pod(1)], {}, None, []),
]


@pytest.mark.parametrize(("pods", "status", "reason", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_waiting_names_the_most_actionable_reason(pods, status, reason, words):
    p = plan(pods, status)
    cond = waiting(p)
    if reason is None:
        assert cond is None or cond["status"] == "False"
        return
    assert cond is not None and cond["status"] == "True" and cond["reason"] == reason, cond
    for word in words:
        assert word in cond["message"]


def test_a_suspended_job_waits_because_it_is_suspended():
    p = plan([], builder=JobBuilder().run_policy(suspend=True))
    assert waiting(p)["reason"] == "Suspended"


def test_an_actionable_reason_is_announced_once():
    first = plan([pod(0, "Pending", waiting=PULL), pod(1, "Pending")])
    assert [e.reason for e in first.events if e.type == "Warning"] == ["ImagePullError"]
    again = plan([pod(0, "Pending", waiting=PULL), pod(1, "Pending")], first.status)
    assert "ImagePullError" not in [e.reason for e in again.events]


def test_once_every_rank_runs_the_condition_says_so():
    first = plan([pod(0, "Pending", waiting=PULL), pod(1, "Pending")])
    later = plan([pod(0), pod(1)], first.status)
    cond = waiting(later)
    assert cond["status"] == "False" and cond["reason"] == "Running"


def test_the_kubelets_waiting_reason_is_read_from_the_pod_init_containers_first():
    raw = {"metadata": {"name": "train-rank-0", "labels": {"dpjob.io/rank": "0"}},
           "status": {"phase": "Pending",
                      "initContainerStatuses": [{"name": "fetch", "state": {"waiting": {
                          "reason": "ErrImagePull", "message": "not found"}}}],
                      "containerStatuses": [{"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}]}}
    assert observe_pod(raw).waiting == "ErrImagePull: not found"
    raw["status"]["phase"] = "Running"
    assert observe_pod(raw).waiting is None
