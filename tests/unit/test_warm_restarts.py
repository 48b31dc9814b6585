"""The books of warm restarts (reconcile/warm_restarts.py): what rank 0's report says the trainer's
supervisors did inside their containers becomes charged restarts, a culprit, events and a goodput
entry, once each; past the budget the job fails. The pods themselves never change (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.progress import ProgressReport, ProgressView, report_from_samples
from dpjob_operator.api.timestamps import iso
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
START = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)
S = START.timestamp()
CPU = DEFAULT_POOLS["cpu"]


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def running(**extra) -> dict:
    return {"phase": "Running", "reason": "AllRanksRunning", "restarts": 0, "failureRestarts": 0,
            "startTime": iso(START), "restartStrategy": "InPlace",
            "progress": {"restart": 0, "step": 130, "lastStepTime": iso(at(50))},
            "conditions": [{"type": "Running", "status": "True", "reason": "AllRanksRunning",
                            "lastTransitionTime": iso(START)}], **extra}


def warm_report(warm: int, *, rank: int = 1, code: int = 137, failed: float = 55.0, first_step: int = 121,
                stepped: float = 56.2) -> ProgressReport:
    """Rank 0 after ``warm`` warm restarts: it resumed at ``first_step`` and stepped at ``stepped``."""
    return ProgressReport(restart=0, observed_at=S + 60, step=140, last_step_time=S + 59, first_step=first_step,
                          first_step_time=S + stepped, warm_restarts=warm, warm_rank=rank, warm_exit_code=code,
                          warm_failed_time=S + failed)


def plan(status: dict, rep: ProgressReport, backoff: int = 3):
    job = JobBuilder().run_policy(backoffLimit=backoff).job()
    return plan_job(job, status, [pod(0), pod(1, node="node-b")], at(60), CPU,
                    progress=ProgressView(0, S, rep), in_place_served=True)


def test_the_report_carries_the_warm_restarts_and_their_cause():
    values = {"dpjob_trainer_step": 140, "dpjob_trainer_warm_restarts": 2, "dpjob_trainer_warm_restart_rank": 1,
              "dpjob_trainer_warm_restart_exit_code": 137,
              "dpjob_trainer_warm_restart_failed_timestamp_seconds": S + 55}
    rep = report_from_samples(values, 0, S + 60)
    assert rep is not None and (rep.warm_restarts, rep.warm_rank, rep.warm_exit_code, rep.warm_failed_time) == \
        (2, 1, 137, S + 55)


def test_a_warm_restart_is_charged_once_with_its_culprit_and_its_cost():
    p = plan(running(), warm_report(1))
    st = p.job_status
    assert (st.restarts, st.failure_restarts, st.restarts_by_strategy, st.restarts_by_reason) == \
        (0, 1, {"Warm": 1}, {"RankFailed": 1}), "the pod generation must not move"
    assert (st.last_failure.rank, st.last_failure.exit_code, st.last_failure.node) == (1, 137, "node-b")
    assert st.last_failure.finished_time == iso(at(55)) and st.phase == "Running"
    assert (st.last_restart.strategy, st.last_restart.restart, st.last_restart.warm_restarts) == ("Warm", 0, 1)
    (entry,) = st.goodput.restarts
    assert (entry.strategy, entry.failed_time, entry.recover_seconds, entry.steps_recomputed) == \
        ("Warm", iso(at(55)), 1.2, 10)  # stepped 1.2 s after the kill; steps 121-130 done twice
    reasons = [e.reason for e in p.events]
    assert "RankFailed" in reasons and "GangRestart" in reasons
    again = plan(p.status, warm_report(1)).job_status
    assert (again.failure_restarts, again.restarts_by_strategy) == (1, {"Warm": 1}), "booked twice"
    assert len(again.goodput.restarts) == 1


@pytest.mark.parametrize("spent, warm, backoff, phase, charged", [
    (0, 2, 3, "Running", 2),      # two warm restarts between two reads: both charged
    (2, 1, 3, "Running", 3),      # the last one the budget allows
    (3, 1, 3, "Failed", 3),       # one too many: the job fails and nothing more is charged
])
def test_warm_restarts_spend_the_budget_and_fail_the_job_past_it(spent, warm, backoff, phase, charged):
    st = plan(running(failureRestarts=spent), warm_report(warm), backoff).job_status
    assert (st.phase, st.failure_restarts) == (phase, charged)
    if phase == "Failed":
        assert st.reason == "BackoffLimitExceeded"


def test_a_report_of_another_generation_books_nothing():
    status = running(restarts=1, failureRestarts=1)
    job = JobBuilder().run_policy(backoffLimit=3).job()
    p = plan_job(job, status, [pod(0, restart=1), pod(1, restart=1)], at(60), CPU,
                 progress=ProgressView(0, S, warm_report(1)), in_place_served=True)
    assert p.job_status.failure_restarts == 1 and "Warm" not in (p.job_status.restarts_by_strategy or {})


@pytest.mark.parametrize("policy, exits", [("OnFailure", "nonzero"), ("ExitCode", "75,128-255")])
def test_in_place_rank_pods_let_the_trainer_restart_warm_for_the_jobs_retriable_exits(policy, exits):
    job = JobBuilder().run_policy(backoffLimit=4, restartPolicy=policy).job()
    trainer = build_rank_pod(job, 0, 0, CPU, in_place=True)["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert (env["DPJOB_WARM_RESTARTS"], env["DPJOB_WARM_RESTART_EXITS"]) == ("4", exits)
    recreate = build_rank_pod(job, 0, 0, CPU)["spec"]["containers"][0]["env"]
    assert "DPJOB_WARM_RESTARTS" not in {e["name"] for e in recreate}


def test_a_job_that_ends_before_the_next_read_is_booked_from_rank_0s_termination_message():
    record = f"dpjob-trainer: warm restarts 1; rank 1 exit 137 at {S + 55:.3f}; stepped at {S + 56.5:.3f}\n"
    done = [pod(0, "Succeeded", exit_code=0, message=record), pod(1, "Succeeded", exit_code=0)]
    job = JobBuilder().run_policy(backoffLimit=3).job()
    st = plan_job(job, running(), done, at(60), CPU, progress=None, in_place_served=True).job_status
    assert (st.phase, st.failure_restarts, st.restarts_by_strategy) == ("Succeeded", 1, {"Warm": 1}), st
    assert (st.last_failure.rank, st.last_failure.exit_code) == (1, 137)
    (entry,) = st.goodput.restarts
    assert (entry.strategy, entry.recover_seconds) == ("Warm", 1.5)


@pytest.mark.parametrize("message", [None, "", "Traceback (most recent call last): ...",
                                     "dpjob-trainer: warm restarts x; rank 1"])
def test_a_termination_message_without_a_record_books_nothing(message):
    done = [pod(0, "Succeeded", exit_code=0, message=message), pod(1, "Succeeded", exit_code=0)]
    job = JobBuilder().run_policy(backoffLimit=3).job()
    st = plan_job(job, running(), done, at(60), CPU, progress=None, in_place_served=True).job_status
    assert st.phase == "Succeeded" and st.failure_restarts == 0 and not st.restarts_by_strategy


def test_a_template_that_turns_warm_restarts_off_keeps_its_setting():
    job = JobBuilder().run_policy(backoffLimit=4).job()
    job.spec.template["spec"]["containers"][0]["env"] = [{"name": "DPJOB_WARM_RESTARTS", "value": "0"}]
    trainer = build_rank_pod(job, 0, 0, CPU, in_place=True)["spec"]["containers"][0]
    warm = [e for e in trainer["env"] if e["name"].startswith("DPJOB_WARM_RESTART")]
    assert warm == [{"name": "DPJOB_WARM_RESTARTS", "value": "0"}], warm
    assert trainer["restartPolicyRules"], "the kubelet still restarts in place"
