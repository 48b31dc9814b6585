"""Root cause: when ranks fail together, the job blames the rank that died, not a bystander.

A user reads ``status.lastFailure`` (and ``kubectl get`` FAILED-RANK) to find the rank to debug;
under ``restartPolicy: ExitCode`` the blamed rank's exit code also decides restart vs. fail.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile.actions import DeletePods
from dpjob_operator.reconcile.planner import plan_job
from dpjob_operator.reconcile.rootcause import EXIT_PEER_LOST, PEER_GRACE_SECONDS, root_cause
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 24, 3, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> str:
    return iso(NOW - timedelta(seconds=seconds))


def failed(index: int, code: int, seconds_ago: float, **kw):
    return pod(index, "Failed", exit_code=code, finished_at=ago(seconds_ago), **kw)


@pytest.mark.parametrize("pods, blamed", [
    # the SIGKILLed rank 1 and rank 0 that lost it, same second: the signal wins over index
    ([failed(0, 1, 2), failed(1, 137, 2)], 1),
    # the earlier termination wins
    ([failed(0, 1, 5), failed(1, 1, 2)], 0),
    ([failed(0, 1, 2), failed(1, 1, 5)], 1),
    # a trainer's lost-a-peer exit ranks behind everything, even an earlier one
    ([failed(0, EXIT_PEER_LOST, 9), failed(1, 1, 2)], 1),
    ([failed(0, EXIT_PEER_LOST, 9), failed(1, EXIT_PEER_LOST, 8), pod(2, "Running")], None),
    # a disruption (eviction) before a plain exit in the same second
    ([failed(0, 1, 2), failed(1, 1, 2, disrupted=True)], 1),
    # no timestamps (a foreign trainer, a pod deleted before it ran): the lowest index
    ([pod(0, "Failed", exit_code=1), pod(1, "Failed", exit_code=1)], 0),
])
def test_the_rank_that_died_first_is_blamed(pods, blamed):
    blame = root_cause([p for p in pods if p.phase == "Failed"], pods, NOW)
    assert (blame.pod.index if blame.pod else None) == blamed


def test_only_bystanders_failed_waits_then_blames_a_bystander():
    bystander = failed(0, EXIT_PEER_LOST, 3)
    victim_still_running = pod(1, "Running")
    blame = root_cause([bystander], [bystander, victim_still_running], NOW)
    assert blame.pod is None and blame.wait_seconds == pytest.approx(PEER_GRACE_SECONDS - 3)
    late = root_cause([bystander], [bystander, victim_still_running], NOW + timedelta(seconds=PEER_GRACE_SECONDS))
    assert late.pod is bystander
    alone = root_cause([bystander], [bystander, failed(1, EXIT_PEER_LOST, 3)], NOW)
    assert alone.pod is bystander  # nobody left running: nothing to wait for


def _plan(policy: str, pods):
    job = JobBuilder().set("runPolicy", {"restartPolicy": policy, "backoffLimit": 3}).job()
    status = {"phase": "Running", "restarts": 0, "failureRestarts": 0, "startTime": ago(60)}
    return plan_job(job, status, pods, NOW, DEFAULT_POOLS["cpu"])


def test_a_bystander_seen_first_holds_the_restart_and_asks_to_look_again():
    plan = _plan("OnFailure", [failed(0, EXIT_PEER_LOST, 1), pod(1, "Running")])
    assert plan.status["restarts"] == 0 and plan.status["phase"] == "Running"
    assert not any(isinstance(a, DeletePods) for a in plan.actions)
    assert "lost a peer" in plan.status["message"]
    assert plan.wake_after == pytest.approx(PEER_GRACE_SECONDS - 1)


def test_the_victim_seen_next_is_blamed_and_exit_code_policy_retries_the_kill():
    plan = _plan("ExitCode", [failed(0, EXIT_PEER_LOST, 1), failed(1, 137, 1)])
    assert plan.status["lastFailure"]["rank"] == 1 and plan.status["lastFailure"]["exitCode"] == 137
    assert plan.status["phase"] == "Restarting" and plan.status["restarts"] == 1


def test_exit_code_policy_never_calls_a_lost_peer_permanent():
    plan = _plan("ExitCode", [failed(0, EXIT_PEER_LOST, 60), failed(1, EXIT_PEER_LOST, 60)])
    assert plan.status["phase"] == "Restarting", plan.status.get("message")
