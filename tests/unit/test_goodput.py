"""status.goodput: what a job's startup and each restart cost, from the planner's view of the pods and
rank 0's progress reports (no cluster). Times are chosen so every expected number is exact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.progress import ProgressReport, ProgressView, report_from_samples
from dpjob_operator.api.status import Goodput, GoodputRestart, JobStatus
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile.goodput import MAX_RESTARTS, _failed_at, lost_seconds
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
START = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)
S = START.timestamp()
CPU = DEFAULT_POOLS["cpu"]


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def report(step: int, t: float, restart: int = 0, **kw) -> ProgressReport:
    return ProgressReport(restart=restart, observed_at=S + t, step=step, last_step_time=S + t, **kw)


def running(restarts: int = 0, **extra) -> dict:
    return {"phase": "Running", "reason": "AllRanksRunning", "restarts": restarts, "failureRestarts": restarts,
            "startTime": iso(START), "restartStrategy": "Recreate",
            "conditions": [{"type": "Running", "status": "True", "reason": "AllRanksRunning",
                            "lastTransitionTime": iso(START)}], **extra}


def plan(status: dict, view: ProgressView | None, now: float, pods=None, builder=None):
    gen = int(status.get("restarts", 0))
    pods = pods if pods is not None else [pod(0, restart=gen), pod(1, restart=gen)]
    job = (builder or JobBuilder().run_policy(backoffLimit=5)).job()
    return plan_job(job, status, pods, at(now), CPU, progress=view)


def goodput(p) -> Goodput:
    return p.job_status.goodput or Goodput()


def test_the_trainer_serves_its_first_step_and_the_report_carries_it():
    values = {"dpjob_trainer_step": 130, "dpjob_trainer_first_step": 101,
              "dpjob_trainer_first_step_timestamp_seconds": S + 40}
    rep = report_from_samples(values, 1, S + 45)
    assert rep is not None and (rep.first_step, rep.first_step_time) == (101, S + 40)


@pytest.mark.parametrize("first_step_time, seen_at, startup", [
    (30.0, 35.0, 30.0),    # the trainer's own time of its first step
    (None, 35.0, 35.0),    # a script that serves only the step: the first report's step time
    (50.0, 40.0, 40.0),    # a node clock ahead of the operator's: no later than the read
])
def test_startup_is_start_time_to_the_first_step(first_step_time, seen_at, startup):
    stepped = None if first_step_time is None else S + first_step_time
    rep = report(5, seen_at, first_step=1, first_step_time=stepped)
    g = goodput(plan(running(), ProgressView(0, S, rep), seen_at + 1))
    assert g.startup_seconds == startup and g.lost_seconds == startup
    assert g.ratio == round(1 - startup / (seen_at + 1), 4)


def failed_gang_passes(exit_after: float = 100.0, booked: float = 103.0):
    """Gang 0 reported step 120 at t=95; rank 1's container ended at ``exit_after``; the operator saw
    it at ``booked``: the pass books restart 1 (Recreate)."""
    status = plan(running(), ProgressView(0, S, report(120, 95, first_step=1, first_step_time=S + 30)), 96).status
    failed = pod(1, "Failed", exit_code=1, finished_at=iso(at(exit_after)))
    return status, plan(status, ProgressView(0, S, report(120, 95)), booked, pods=[pod(0), failed])


def test_a_restart_is_booked_with_its_failure_time_and_detection_delay():
    _, p = failed_gang_passes()
    (entry,) = goodput(p).restarts
    assert p.job_status.phase == "Restarting"
    assert entry == GoodputRestart(restart=1, strategy="Recreate", reason=entry.reason,
                                   failed_time=iso(at(100)), detect_seconds=3.0)
    assert p.job_status.last_failure.finished_time == iso(at(100))


def test_a_culprit_named_after_the_booking_moves_the_failure_time_to_its_earlier_end():
    """In place, the first record to arrive may be a bystander's (it lost its peer a moment later);
    when the culprit's arrives, the restart counts from the culprit's end."""
    _, booked = failed_gang_passes(exit_after=100.0, booked=103.0)
    status = {**booked.status, "lastFailure": {**booked.status["lastFailure"], "finishedTime": iso(at(98))}}
    (entry,) = goodput(plan(status, ProgressView(0, S, report(120, 95)), 104)).restarts
    assert (entry.failed_time, entry.detect_seconds) == (iso(at(98)), 5.0)
    later = {**status, "lastFailure": {**status["lastFailure"], "finishedTime": iso(at(101))}}
    (kept,) = goodput(plan(later, ProgressView(0, S, report(120, 95)), 105)).restarts
    assert kept.failed_time == iso(at(100)), "a later end never moves the failure forward"


def test_the_new_gangs_first_step_closes_the_restart_with_recovery_and_recomputed_steps():
    _, booked = failed_gang_passes()
    # Gang 1 resumed from the checkpoint at step 100 (its first step is 101) and stepped at t=112.
    status = {**booked.status, "phase": "Running", "reason": "AllRanksRunning"}
    rep = report(104, 115, restart=1, first_step=101, first_step_time=S + 112)
    g = goodput(plan(status, ProgressView(1, S + 110, rep), 116))
    (entry,) = g.restarts
    assert (entry.recover_seconds, entry.steps_recomputed) == (12.0, 20)
    assert g.startup_seconds == 30.0


def test_an_open_restart_counts_as_lost_until_the_gang_steps_again():
    g = Goodput(startup_seconds=10.0, restarts=(GoodputRestart(restart=1, failed_time=iso(at(100))),))
    assert lost_seconds(g, None, S + 130) == 40.0
    closed = Goodput(startup_seconds=10.0, restarts=(GoodputRestart(restart=1, failed_time=iso(at(100)),
                                                                    recover_seconds=12.0, steps_recomputed=20),))
    assert lost_seconds(closed, 4.0, S + 500) == 10.0 + 12.0 + 5.0  # 20 steps at 4 steps/s
    assert lost_seconds(Goodput(), 4.0, S + 500) is None  # never stepped: nothing to compare


def test_a_stall_restart_without_a_failed_container_counts_from_the_last_step():
    status = JobStatus.from_dict(running(progress={"restart": 0, "step": 50, "lastStepTime": iso(at(80))}))
    assert _failed_at(status, 0) == S + 80


def test_only_the_latest_restarts_are_kept():
    status = running(restarts=MAX_RESTARTS + 2, goodput={"startupSeconds": 5.0, "restarts": [
        {"restart": k, "failedTime": iso(at(k)), "recoverSeconds": 1.0} for k in range(1, MAX_RESTARTS + 1)]})
    failed = pod(1, "Failed", restart=MAX_RESTARTS + 2, exit_code=1, finished_at=iso(at(200)))
    restarts = goodput(plan(status, None, 201, pods=[pod(0, restart=MAX_RESTARTS + 2), failed],
                            builder=JobBuilder().run_policy(backoffLimit=50))).restarts
    assert len(restarts) == MAX_RESTARTS and restarts[-1].restart == MAX_RESTARTS + 3 and restarts[0].restart == 2


def test_the_ratio_rides_along_and_never_costs_a_write_of_its_own():
    first = plan(running(), ProgressView(0, S, report(10, 30, first_step=1, first_step_time=S + 30)), 31)
    again = plan(first.status, ProgressView(0, S, report(10, 30)), 90)
    assert again.status == first.status
