"""Reconcile decisions, table-driven: observed state -> exactly these actions and this status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile.actions import (
    CreatePods,
    DeleteJob,
    DeletePods,
    EnsureEnvironment,
    EnsureNetworkPolicy,
    EnsureService,
)
from dpjob_operator.reconcile.planner import next_wakeup, plan_job
from dpjob_operator.reconcile.restart import decide_failure
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def plan(builder, status=None, pods=(), now=NOW, pool="cpu"):
    job = builder.job()
    return plan_job(job, status or {}, list(pods), now, DEFAULT_POOLS.get(pool) if pool else None)


def kinds(p):
    return [type(a).__name__ for a in p.actions]


def deleted(p):
    return sorted(n for a in p.actions if isinstance(a, DeletePods) for n in a.names)


def test_new_job_creates_every_rank_in_one_action_and_is_pending():
    p = plan(JobBuilder().replicas(4))
    assert p.actions == [EnsureService(), EnsureNetworkPolicy(), EnsureEnvironment(), CreatePods((0, 1, 2, 3), 0)]
    assert p.status["phase"] == "Pending"
    assert p.status["worldSize"] == 4 and p.status["restarts"] == 0
    assert p.status["startTime"] == iso(NOW)
    assert p.status["selector"] == "dpjob.io/job-name=train,app.kubernetes.io/managed-by=dpjob-operator"
    assert [e.reason for e in p.events] == ["Accepted"]


def test_all_ranks_running_makes_the_job_running_with_an_event():
    p = plan(JobBuilder().replicas(2), {"phase": "Created", "restarts": 0, "startTime": iso(NOW)},
             [pod(0), pod(1)])
    assert p.status["phase"] == "Running" and p.status["ready"] == "2/2"
    assert CreatePods not in map(type, p.actions)
    assert [e.reason for e in p.events] == ["AllRanksRunning"]
    assert next(c for c in p.status["conditions"] if c["type"] == "Running")["status"] == "True"


def test_partially_created_gang_only_creates_the_missing_ranks():
    p = plan(JobBuilder().replicas(4), {"phase": "Pending", "restarts": 0}, [pod(0), pod(2, "Pending")])
    assert CreatePods((1, 3), 0) in p.actions
    assert p.status["phase"] == "Pending"


@pytest.mark.parametrize("policy, exit_code, failure_restarts, limit, restart, reason", [
    ("OnFailure", 1, 0, 3, True, "RankFailed"),
    ("OnFailure", 1, 3, 3, False, "BackoffLimitExceeded"),
    ("Never", 137, 0, 3, False, "RankFailed"),
    ("ExitCode", 2, 0, 3, False, "PermanentError"),
    ("ExitCode", 137, 0, 3, True, "RankFailed"),
    ("ExitCode", 143, 3, 3, False, "BackoffLimitExceeded"),
    ("OnFailure", 1, 0, 0, False, "BackoffLimitExceeded"),
])
def test_failure_policy(policy, exit_code, failure_restarts, limit, restart, reason):
    job = JobBuilder().run_policy(restartPolicy=policy, backoffLimit=limit).job()
    d = decide_failure(job.spec.run_policy, pod(1, "Failed", exit_code=exit_code), failure_restarts)
    assert (d.restart, d.reason) == (restart, reason)
    assert "rank 1" in d.message and str(exit_code) in d.message


def test_disruption_restarts_without_charging_the_backoff_limit():
    job = JobBuilder().run_policy(restartPolicy="Never", backoffLimit=0).job()
    d = decide_failure(job.spec.run_policy, pod(0, "Failed", exit_code=137, reason="Evicted", disrupted=True), 0)
    assert d.restart and not d.counted and d.reason == "Preempted"


def test_failed_rank_restarts_the_whole_gang_and_status_is_written_first():
    status = {"phase": "Running", "restarts": 0, "failureRestarts": 0, "startTime": iso(NOW)}
    p = plan(JobBuilder().replicas(3), status,
             [pod(0), pod(1, "Failed", exit_code=1, reason="Error"), pod(2)])
    assert p.status["phase"] == "Restarting"
    assert p.status["restarts"] == 1 and p.status["failureRestarts"] == 1
    assert p.status["restartsByReason"] == {"RankFailed": 1}
    assert deleted(p) == ["train-rank-0", "train-rank-1", "train-rank-2"]
    assert p.status["lastFailure"]["rank"] == 1 and p.status["lastFailure"]["exitCode"] == 1
    assert [e.reason for e in p.events] == ["RankFailed", "GangRestart"]
    assert p.events[0].message.startswith("rank 1 (pod train-rank-1) failed with exit code 1")


def test_after_a_restart_old_pods_block_their_names_until_gone():
    status = {"phase": "Restarting", "restarts": 1, "failureRestarts": 1}
    old = [pod(0, restart=0, deleting=True), pod(1, "Failed", restart=0, deleting=True)]
    p = plan(JobBuilder().replicas(2), status, old)
    assert not any(isinstance(a, CreatePods) for a in p.actions)
    p = plan(JobBuilder().replicas(2), status, [])
    assert CreatePods((0, 1), 1) in p.actions
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1


def test_restart_decision_is_not_repeated_on_the_next_pass():
    # The failed pod is now of a stale generation: it must not trigger restart 2.
    status = {"phase": "Restarting", "restarts": 1, "failureRestarts": 1}
    p = plan(JobBuilder().replicas(2), status, [pod(1, "Failed", restart=0, exit_code=1)])
    assert p.status["restarts"] == 1
    assert deleted(p) == ["train-rank-1"]


def test_recovered_gang_goes_back_to_running():
    status = {"phase": "Restarting", "restarts": 1, "failureRestarts": 1,
              "conditions": [{"type": "Restarting", "status": "True", "reason": "RankFailed", "message": "",
                              "lastTransitionTime": iso(NOW)}]}
    p = plan(JobBuilder().replicas(2), status, [pod(0, restart=1), pod(1, restart=1)])
    assert p.status["phase"] == "Running"
    assert next(c for c in p.status["conditions"] if c["type"] == "Restarting")["status"] == "False"


def test_backoff_exhausted_fails_naming_rank_and_exit_code_and_cleans_running_pods():
    status = {"phase": "Running", "restarts": 2, "failureRestarts": 2}
    p = plan(JobBuilder().replicas(2).run_policy(backoffLimit=2), status,
             [pod(0, restart=2), pod(1, "Failed", restart=2, exit_code=3)])
    assert p.status["phase"] == "Failed" and p.status["reason"] == "BackoffLimitExceeded"
    assert "rank 1" in p.status["message"] and "exit code 3" in p.status["message"]
    assert p.status["lastFailure"]["pod"] == "train-rank-1"
    assert deleted(p) == ["train-rank-0"]          # cleanPodPolicy Running: the failed pod stays for logs
    assert p.status["completionTime"] == iso(NOW)


@pytest.mark.parametrize("clean, expected", [
    ("Running", ["train-rank-0"]), ("All", ["train-rank-0", "train-rank-1"]), ("None", []),
])
def test_clean_pod_policy_on_failure(clean, expected):
    status = {"phase": "Running", "restarts": 0}
    p = plan(JobBuilder().run_policy(restartPolicy="Never", cleanPodPolicy=clean), status,
             [pod(0), pod(1, "Failed", exit_code=1)])
    assert deleted(p) == expected


@pytest.mark.parametrize("policy, pods, done, stopped", [
    ("AllRanks", [pod(0, "Succeeded"), pod(1, "Succeeded")], True, []),
    ("AllRanks", [pod(0, "Succeeded"), pod(1)], False, []),
    ("RankZero", [pod(0, "Succeeded"), pod(1)], True, ["train-rank-1"]),
    ("RankZero", [pod(0), pod(1, "Succeeded")], False, []),
])
def test_success_policy_stops_leftover_ranks(policy, pods, done, stopped):
    p = plan(JobBuilder().set("successPolicy", policy), {"phase": "Running", "restarts": 0}, pods)
    assert (p.status["phase"] == "Succeeded") is done
    assert deleted(p) == stopped
    if done:
        assert p.status["runningReplicas"] == 0  # a Succeeded job never reports running ranks


def test_suspend_deletes_pods_and_resume_recreates_them():
    running = {"phase": "Running", "restarts": 0, "startTime": iso(NOW)}
    p = plan(JobBuilder().run_policy(suspend=True), running, [pod(0), pod(1)])
    assert p.status["phase"] == "Suspended" and deleted(p) == ["train-rank-0", "train-rank-1"]
    assert "startTime" not in p.status
    p2 = plan(JobBuilder(), p.status, [])
    assert CreatePods((0, 1), 0) in p2.actions
    assert "Resumed" in [e.reason for e in p2.events]
    assert next(c for c in p2.status["conditions"] if c["type"] == "Suspended")["status"] == "False"


def test_deadline_fails_the_job_and_stops_ranks():
    start = NOW - timedelta(seconds=61)
    p = plan(JobBuilder().run_policy(activeDeadlineSeconds=60), {"phase": "Running", "restarts": 0,
                                                                 "startTime": iso(start)}, [pod(0), pod(1)])
    assert p.status["phase"] == "Failed" and p.status["reason"] == "DeadlineExceeded"
    assert deleted(p) == ["train-rank-0", "train-rank-1"]


def test_ttl_deletes_a_finished_job_only_when_due():
    done = {"phase": "Succeeded", "restarts": 0, "completionTime": iso(NOW - timedelta(seconds=5))}
    assert DeleteJob("ttlSecondsAfterFinished=10 elapsed") not in plan(
        JobBuilder().run_policy(ttlSecondsAfterFinished=10), done).actions
    assert any(isinstance(a, DeleteJob) for a in plan(JobBuilder().run_policy(ttlSecondsAfterFinished=5), done).actions)
    assert next_wakeup(JobBuilder().run_policy(ttlSecondsAfterFinished=10).job(), done, NOW) == pytest.approx(5)


def test_finished_jobs_never_come_back():
    done = {"phase": "Succeeded", "restarts": 0, "completionTime": iso(NOW)}
    p = plan(JobBuilder(), done, [])
    assert not any(isinstance(a, (CreatePods, EnsureService, EnsureEnvironment)) for a in p.actions)
    assert p.status["phase"] == "Succeeded"


def test_static_resize_is_a_gang_restart_not_charged_to_backoff():
    status = {"phase": "Running", "restarts": 0, "failureRestarts": 0}
    pods = [pod(0, replicas_annotation=2), pod(1, replicas_annotation=2)]
    p = plan(JobBuilder().replicas(3), status, pods)
    assert p.status["restarts"] == 1 and p.status["failureRestarts"] == 0
    assert p.status["restartsByReason"] == {"Resized": 1}
    assert deleted(p) == ["train-rank-0", "train-rank-1"]


def test_elastic_scale_adds_and_removes_ranks_without_restart():
    status = {"phase": "Running", "restarts": 0}
    up = plan(JobBuilder().replicas(3).elastic(1, 4), status, [pod(0), pod(1)])
    assert CreatePods((2,), 0) in up.actions and up.status["restarts"] == 0
    down = plan(JobBuilder().replicas(1).elastic(1, 4), status, [pod(0), pod(1)])
    assert deleted(down) == ["train-rank-1"] and down.status["restarts"] == 0


def test_a_rank_pod_deleted_by_someone_restarts_a_running_gang():
    p = plan(JobBuilder().replicas(2), {"phase": "Running", "restarts": 0}, [pod(0)])
    assert p.status["phase"] == "Restarting" and p.status["restartsByReason"] == {"PodDeleted": 1}


def test_missing_pool_is_a_condition_not_a_crash():
    p = plan(JobBuilder().accelerator("npu"), {}, [], pool=None)
    assert p.status["phase"] == "Pending" and p.status["reason"] == "PoolNotConfigured"
    assert p.events[0].type == "Warning"
    assert not any(isinstance(a, CreatePods) for a in p.actions)


def test_unschedulable_rank_is_reported_once():
    status = {"phase": "Created", "restarts": 0}
    pods = [pod(0), pod(1, "Pending", node=None, unschedulable="0/10 nodes are available: Insufficient nvidia.com/gpu")]
    p = plan(JobBuilder(), status, pods)
    cond = next(c for c in p.status["conditions"] if c["type"] == "PodsScheduled")
    assert cond["status"] == "False" and "Insufficient nvidia.com/gpu" in cond["message"]
    assert "Unschedulable" in [e.reason for e in p.events]
    again = plan(JobBuilder(), p.status, pods)
    assert "Unschedulable" not in [e.reason for e in again.events]


def test_stale_generation_pods_are_deleted():
    p = plan(JobBuilder(), {"phase": "Running", "restarts": 2}, [pod(0, restart=2), pod(1, restart=2),
                                                                 pod(1, restart=1, job="train")])
    assert "train-rank-1" in deleted(p)


def test_ranks_that_finish_first_keep_the_job_running():
    p = plan(JobBuilder(), {"phase": "Running", "restarts": 0}, [pod(0), pod(1, "Succeeded")])
    assert p.status["phase"] == "Running" and "1/2 rank(s) finished" in p.status["message"]
    assert not p.events


@pytest.mark.parametrize("rank1", [pod(1, deleting=True), None], ids=["terminating", "gone"])
def test_a_rank_deleted_by_someone_else_restarts_a_running_static_gang(rank1):
    """kubectl delete / eviction of one rank: never recreate it alone into a group that cannot take it back."""
    pods = [pod(0)] + ([rank1] if rank1 else [])
    p = plan(JobBuilder().replicas(2), {"phase": "Running", "restarts": 0, "startTime": iso(NOW)}, pods)
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert p.status["failureRestarts"] == 0  # not the job's fault: not charged to backoffLimit
    assert p.status["lastFailure"]["rank"] == 1 and p.status["lastFailure"]["reason"] == "PodDeleted"
    assert deleted(p) == ["train-rank-0"] and CreatePods not in map(type, p.actions)


def test_elastic_scale_down_deleting_the_highest_rank_is_not_a_failure():
    p = plan(JobBuilder().replicas(2).elastic(1, 4), {"phase": "Running", "restarts": 0, "startTime": iso(NOW)},
             [pod(0), pod(1), pod(2, deleting=True)])
    assert p.status["phase"] == "Running" and p.status["restarts"] == 0


@pytest.mark.parametrize("pods", [
    [pod(0), pod(1), pod(2, deleting=True)],   # a rank is being replaced
    [pod(0), pod(1)],                          # kubectl scale 2 -> 3: the third is on its way
])
def test_a_running_elastic_job_stays_running_while_ranks_join(pods):
    p = plan(JobBuilder().replicas(3).elastic(2, 4), {"phase": "Running", "reason": "AllRanksRunning",
                                                     "restarts": 0, "startTime": iso(NOW)}, pods)
    assert p.status["phase"] == "Running" and p.status["restarts"] == 0
    assert p.status["message"] == "elastic: 2/3 rank(s) running, 1 joining"
    assert not p.events


@pytest.mark.parametrize(("status", "wake_after", "expected"), [
    ({"phase": "Running", "restarts": 0}, None, 30.0),                  # nothing due: the resync
    ({"phase": "Pending", "restarts": 0}, None, 30.0),                  # a gang verdict is watched, not polled
    ({"phase": "Running", "restarts": 0}, 2.0, 2.05),                   # a policy's own wake-up
    ({"phase": "Succeeded", "restarts": 0, "completionTime": iso(NOW - timedelta(seconds=7))}, 5.0, 3.05),
])
def test_a_job_is_looked_at_again_at_the_earliest_thing_due(status, wake_after, expected):
    from dpjob_operator.reconcile.actions import Plan
    from dpjob_operator.reconcile.planner import look_again_in

    job = JobBuilder().run_policy(ttlSecondsAfterFinished=10).job()
    assert look_again_in(job, Plan(status, [], wake_after=wake_after), NOW, 30.0) == pytest.approx(expected)


@pytest.mark.parametrize(("stored", "first"), [
    ({}, True),                                                          # never written
    ({"phase": "Pending", "restarts": 0}, False),                        # every write sets a phase
    ({"phase": "Running", "restarts": 2, "failureRestarts": 2}, False),  # a restart must be written first
])
def test_only_a_jobs_first_pass_writes_its_status_beside_its_children(stored, first):
    from dpjob_operator.reconcile.first_pass import writes_alongside

    assert writes_alongside(stored) is first
    assert writes_alongside(plan(JobBuilder()).status) is False  # what the first pass writes ends it
