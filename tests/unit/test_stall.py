"""The stall watchdog, with an injected clock: when a Running gang counts as stalled, and what each
stallPolicy then does to the job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.progress import ProgressReport, ProgressView
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile.actions import DeletePods
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
T = NOW.timestamp()
RUNNING_SINCE = NOW - timedelta(minutes=10)


def job(policy: str = "Restart", stall: int | None = 30, startup: int | None = None, backoff: int = 3) -> JobBuilder:
    rp = {"stallPolicy": policy, "backoffLimit": backoff}
    if stall:
        rp["stallTimeoutSeconds"] = stall
    if startup:
        rp["startupTimeoutSeconds"] = startup
    return JobBuilder().run_policy(**rp)


def status(phase: str = "Running", restarts: int = 0, **extra) -> dict:
    return {"phase": phase, "reason": "AllRanksRunning", "restarts": restarts, "failureRestarts": 0,
            "startTime": iso(RUNNING_SINCE),
            "conditions": [{"type": "Running", "status": "True" if phase == "Running" else "False",
                            "reason": "AllRanksRunning", "lastTransitionTime": iso(RUNNING_SINCE)}], **extra}


def view(step: int | None, last_step_ago: float = 0.0, restart: int = 0,
         watching_since: datetime = RUNNING_SINCE, now: datetime = NOW) -> ProgressView:
    """What the reader knows at ``now``: rank 0 read since ``watching_since``, its last step ``last_step_ago`` s ago."""
    at = now.timestamp()
    latest = None if step is None else ProgressReport(restart, at, step, at - last_step_ago)
    return ProgressView(restart, watching_since.timestamp(), latest)


def plan(builder: JobBuilder, st: dict, progress: ProgressView | None, now: datetime = NOW):
    gen = int(st.get("restarts", 0))
    return plan_job(builder.job(), st, [pod(0, restart=gen), pod(1, restart=gen)], now, DEFAULT_POOLS["cpu"],
                    progress=progress)


def cond(p, type_: str = "Stalled") -> dict | None:
    return next((c for c in p.status.get("conditions", []) if c["type"] == type_), None)


def test_a_gang_that_stepped_recently_is_not_stalled_and_the_pass_wakes_at_the_deadline():
    p = plan(job(), status(), view(120, last_step_ago=12))
    assert p.status["phase"] == "Running" and cond(p) is None
    assert not [a for a in p.actions if isinstance(a, DeletePods)]
    assert p.wake_after == pytest.approx(18)


def test_no_step_for_the_timeout_restarts_the_gang_uncharged_and_says_so():
    p = plan(job("Restart"), status(), view(120, last_step_ago=31))
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert p.status["restartsByReason"] == {"Stalled": 1} and p.status["failureRestarts"] == 0
    assert DeletePods(("train-rank-0", "train-rank-1"), "GangRestartStalled") in p.actions
    c = cond(p)
    assert (c["status"], c["reason"]) == ("True", "Stalled") and "since step 120" in c["message"]
    assert ("Warning", "Stalled") in {(e.type, e.reason) for e in p.events}
    assert p.status["lastStall"] == {"reason": "Stalled", "restart": 0, "step": 120, "time": iso(NOW),
                                     "message": c["message"]}


def test_stall_policy_fail_fails_the_job():
    p = plan(job("Fail"), status(), view(120, last_step_ago=31))
    assert p.status["phase"] == "Failed" and p.status["reason"] == "Stalled"
    assert cond(p)["status"] == "True" and p.status["restarts"] == 0
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "Stalled")]


def test_stall_policy_none_reports_once_and_leaves_the_gang_running():
    first = plan(job("None"), status(), view(120, last_step_ago=31))
    assert first.status["phase"] == "Running" and first.status["restarts"] == 0
    assert cond(first)["status"] == "True" and not [a for a in first.actions if isinstance(a, DeletePods)]
    assert [e.reason for e in first.events] == ["Stalled"]
    minute, two = NOW + timedelta(minutes=1), NOW + timedelta(minutes=2)
    later = plan(job("None"), first.status, view(120, last_step_ago=91, now=minute), minute)
    assert later.events == [], "the same stall is announced once"
    resumed = plan(job("None"), later.status, view(121, last_step_ago=1, now=two), two)
    assert (cond(resumed)["status"], cond(resumed)["reason"]) == ("False", "Progressing")


def test_no_stall_before_the_first_step_however_long_the_rendezvous_takes():
    p = plan(job(stall=30), status(), view(None), NOW + timedelta(hours=2))
    assert p.status["phase"] == "Running" and cond(p) is None and p.wake_after is None


def test_startup_timeout_catches_a_gang_that_never_reaches_step_one():
    builder = job(stall=30, startup=600)
    before = plan(builder, status(), view(None), RUNNING_SINCE + timedelta(seconds=590))
    assert before.status["phase"] == "Running" and before.wake_after == pytest.approx(10)
    p = plan(builder, status(), view(None), RUNNING_SINCE + timedelta(seconds=601))
    assert p.status["phase"] == "Restarting" and p.status["restartsByReason"] == {"StartupTimeout": 1}
    assert cond(p)["reason"] == "StartupTimeout" and "startupTimeoutSeconds=600" in cond(p)["message"]


@pytest.mark.parametrize("phase", ["Pending", "Created", "Restarting", "Suspended"])
def test_no_stall_unless_the_job_is_running(phase):
    p = plan(job(), status(phase), view(120, last_step_ago=3600))
    assert cond(p) is None and p.status["restarts"] == 0


def test_a_report_of_the_previous_gang_does_not_stall_the_new_one():
    p = plan(job(), status(restarts=1), view(120, last_step_ago=3600, restart=0))
    assert p.status["phase"] == "Running" and p.status["restarts"] == 1


def test_an_operator_restart_does_not_turn_an_old_status_into_a_stall():
    """The status says step 120 five minutes ago (written before the operator went away); this
    operator has read rank 0 only for 5 s: it waits out the full timeout itself."""
    written = status(progress={"restart": 0, "step": 120, "lastStepTime": iso(NOW - timedelta(minutes=5))})
    p = plan(job(), written, view(None, watching_since=NOW - timedelta(seconds=5)))
    assert p.status["phase"] == "Running" and p.wake_after == pytest.approx(25)
    later = plan(job(), written, view(None, watching_since=NOW - timedelta(seconds=5)), NOW + timedelta(seconds=26))
    assert later.status["phase"] == "Restarting", "nothing moved while this operator watched: a stall"


def test_the_stall_clock_falls_back_to_the_written_step_when_no_read_succeeds():
    """Rank 0 hangs so hard that its endpoint stops answering: the step time in status still counts."""
    written = status(progress={"restart": 0, "step": 120, "lastStepTime": iso(NOW - timedelta(seconds=40))})
    p = plan(job(), written, view(None))
    assert p.status["phase"] == "Restarting" and "since step 120" in cond(p)["message"]


def test_stalling_again_without_getting_further_is_charged_and_ends_at_the_backoff_limit():
    previous = {"reason": "Stalled", "restart": 0, "step": 120, "time": iso(NOW - timedelta(minutes=5))}
    further = plan(job(backoff=1), status(restarts=1, lastStall=previous), view(150, 31, restart=1))
    assert further.status["restarts"] == 2 and further.status["failureRestarts"] == 0, "got past step 120: free"
    again = plan(job(backoff=1), status(restarts=1, lastStall=previous), view(110, 31, restart=1))
    assert again.status["restarts"] == 2 and again.status["failureRestarts"] == 1
    assert "charged to backoffLimit: no step past the previous stall's" in again.status["message"]
    spent = status(restarts=1, lastStall=previous)
    spent["failureRestarts"] = 1
    failed = plan(job(backoff=1), spent, view(110, 31, restart=1))
    assert failed.status["phase"] == "Failed" and failed.status["reason"] == "BackoffLimitExceeded"
    assert "without passing step 120" in failed.status["message"]


def test_watchdog_off_by_default():
    p = plan(JobBuilder(), status(), view(120, last_step_ago=86400))
    assert p.status["phase"] == "Running" and cond(p) is None


def test_a_job_that_succeeds_after_a_stall_restart_is_no_longer_stalled():
    """The restarted gang may finish between two reads of rank 0: success still clears the condition."""
    stalled = plan(job(), status(), view(120, last_step_ago=31)).status
    stalled.update(phase="Running", restarts=1)
    done = plan_job(job().job(), stalled, [pod(0, "Succeeded", restart=1), pod(1, "Succeeded", restart=1)], NOW,
                    DEFAULT_POOLS["cpu"], progress=view(None, restart=1))
    assert done.status["phase"] == "Succeeded"
    assert (cond(done)["status"], cond(done)["reason"]) == ("False", "JobSucceeded")
    assert done.status["restartsByReason"] == {"Stalled": 1}
