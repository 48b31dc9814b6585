"""A job Kueue queues, through the planner: this Workload and these pods lead to exactly these actions,
this phase, these conditions and events (reconcile/kueue_gate.py, reconcile/kueue_sync.py). No cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api import kueue as k
from dpjob_operator.api.observed import KueueObservation
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.spec import parse_job
from dpjob_operator.api.timestamps import iso
from dpjob_operator.builders.kueue_workload import build_workload
from dpjob_operator.reconcile.actions import (
    CreatePods,
    DeleteKueueWorkload,
    DeletePods,
    EnsureEnvironment,
    EnsureKueueWorkload,
    EnsureNetworkPolicy,
    EnsureService,
    PatchKueueWorkload,
)
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 3, 21, 16, 0, 0, tzinfo=UTC)
EARLIER = iso(NOW - timedelta(minutes=5))
SPOT = {"key": "cloud.example.com/spot", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = {"spot": k.Flavor(node_labels={"cloud.example.com/spot": "true"}, tolerations=(SPOT,))}


def cond(ctype, status, reason, message=""):
    return {"type": ctype, "status": "True" if status else "False", "reason": reason, "message": message,
            "lastTransitionTime": EARLIER}


PENDING = cond("QuotaReserved", False, "Pending", "couldn't assign flavors to pod set main: insufficient quota for "
                                                   "cpu in flavor spot, 4 more needed")
RESERVED = cond("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue team-cq")
ADMITTED = cond("Admitted", True, "Admitted", "The workload is admitted")
PREEMPTED = cond("Evicted", True, "Preempted", "Preempted to accommodate a workload (UID: u9) due to prioritization")
ADMISSION = {"clusterQueue": "team-cq", "podSetAssignments": [{"name": "main", "count": 2, "flavors": {"cpu": "spot"}}]}


def queued_job(builder=None, queue="team-a", labels=None):
    body = (builder or JobBuilder()).served()
    body["metadata"]["labels"] = {**({k.LABEL_QUEUE_NAME: queue} if queue else {}), **(labels or {})}
    return parse_job(body)


def workload(job, *conditions, admission=None, deleting=False, **meta):
    """The Workload the operator made for ``job``, as Kueue left it."""
    body = build_workload(job, DEFAULT_POOLS["cpu"])
    body["metadata"].update({"resourceVersion": "42", "generation": 1, **meta})
    if deleting:
        body["metadata"]["deletionTimestamp"] = EARLIER
    body["status"] = {"conditions": list(conditions), **({"admission": admission} if admission else {})}
    return body


def observed(job, body=None, flavors=FLAVORS):
    name = k.workload_name(job.name, job.uid)
    return KueueObservation(name, body, k.parse_workload(body) if body is not None else None, flavors)


def plan(job, status=None, pods=(), body=None, flavors=FLAVORS, absent=False):
    kueue = observed(job, body, flavors) if not absent else None
    return plan_job(job, status or {}, list(pods), NOW, DEFAULT_POOLS["cpu"], kueue=kueue)


def condition(p, ctype):
    return next((c for c in p.status.get("conditions", []) if c["type"] == ctype), None)


def kueue_writes(p):
    return [(a.why, a.status, a.patch) for a in p.actions if isinstance(a, PatchKueueWorkload)]


def deleted(p):
    return sorted((n, a.reason) for a in p.actions if isinstance(a, DeletePods) for n in a.names)


RUNNING = {"phase": "Running", "restarts": 0, "failureRestarts": 0, "startTime": EARLIER,
           "kueue": {"workload": "w", "queue": "team-a"},
           "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted",
                           "lastTransitionTime": EARLIER}]}


# ---- waiting -------------------------------------------------------------------------------------


def test_a_new_queued_job_makes_its_workload_and_waits_without_pods_or_a_clock():
    job = queued_job(JobBuilder().run_policy(activeDeadlineSeconds=60))
    p = plan(job)
    assert p.actions == [EnsureKueueWorkload()]
    assert (p.status["phase"], p.status["reason"]) == ("Queued", "Queued")
    assert "startTime" not in p.status
    assert p.status["kueue"] == {"workload": k.workload_name("train", "uid-train"), "queue": "team-a"}
    assert condition(p, "Admitted")["status"] == "False"
    assert (condition(p, "Waiting")["status"], condition(p, "Waiting")["reason"]) == ("True", "Queued")
    assert [e.reason for e in p.events] == ["Queued"]


@pytest.mark.parametrize("conditions, reason, message", [
    ((), "Queued", "waiting for Kueue to reserve quota through LocalQueue 'team-a'"),
    ((PENDING,), "Pending", PENDING["message"]),
    ((cond("QuotaReserved", False, "Inadmissible", "LocalQueue team-a doesn't exist"),), "Inadmissible",
     "LocalQueue team-a doesn't exist"),
])
def test_a_queued_job_says_why_in_kueues_words_and_announces_nothing_new(conditions, reason, message):
    job = queued_job()
    first = plan(job, body=workload(job, *conditions))
    assert first.actions == [] and first.status["phase"] == "Queued"
    assert (condition(first, "Admitted")["reason"], condition(first, "Admitted")["message"]) == (reason, message)
    again = plan(job, first.status, body=workload(job, *conditions))
    assert again.events == [] and again.status == first.status


def test_a_deadline_does_not_run_while_the_job_waits_in_the_queue():
    job = queued_job(JobBuilder().run_policy(activeDeadlineSeconds=1))
    p = plan(job, {"phase": "Queued", "reason": "Queued", "restarts": 0}, body=workload(job, PENDING))
    assert p.status["phase"] == "Queued"


def test_a_missing_resource_flavor_starts_nothing_and_names_the_flavor():
    job = queued_job()
    p = plan(job, body=workload(job, RESERVED, ADMITTED, admission=ADMISSION), flavors={})
    assert not any(isinstance(a, CreatePods) for a in p.actions)
    assert condition(p, "Admitted")["reason"] == "ResourceFlavorNotFound" and "'spot'" in condition(p, "Admitted")[
        "message"]


# ---- admitted --------------------------------------------------------------------------------------


def test_an_admitted_job_creates_its_ranks_where_kueue_placed_them():
    job = queued_job()
    status = plan(job, body=workload(job, PENDING)).status
    p = plan(job, status, body=workload(job, RESERVED, ADMITTED, admission=ADMISSION))
    placement = k.Placement(node_selector={"cloud.example.com/spot": "true"}, tolerations=(SPOT,),
                            labels={"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "team-a",
                                    "kueue.x-k8s.io/cluster-queue-name": "team-cq"},
                            annotations={"kueue.x-k8s.io/workload": k.workload_name("train", "uid-train")}, count=2)
    assert p.actions[:4] == [EnsureService(), EnsureNetworkPolicy(), EnsureEnvironment(),
                             CreatePods((0, 1), 0, admission=placement)]
    # and Kueue's waitForPodsReady starts timing: PodsReady=False/WaitForStart
    [(why, _, patch)] = kueue_writes(p)
    assert why == "pods ready" and patch["status"]["conditions"][-1]["reason"] == "WaitForStart"
    assert (condition(p, "Admitted")["status"], condition(p, "Admitted")["reason"]) == ("True", "Admitted")
    assert [e.reason for e in p.events] == ["Admitted", "Accepted"]
    assert p.status["phase"] == "Pending" and p.status["startTime"] == iso(NOW)
    assert p.status["kueue"]["clusterQueue"] == "team-cq" and p.status["kueue"]["flavors"] == ["spot"]


@pytest.mark.parametrize("pods, ready, reason", [
    ([pod(0), pod(1)], "True", "Started"),
    ([pod(0), pod(1, "Pending", ready=False)], "False", "WaitForStart"),
])
def test_pods_ready_tells_kueue_when_every_rank_is_ready(pods, ready, reason):
    job = queued_job()
    p = plan(job, RUNNING, pods, body=workload(job, RESERVED, ADMITTED, admission=ADMISSION))
    [(why, to_status, patch)] = kueue_writes(p)
    assert (why, to_status) == ("pods ready", True)
    assert patch["metadata"] == {"resourceVersion": "42"}
    got = next(c for c in patch["status"]["conditions"] if c["type"] == "PodsReady")
    assert (got["status"], got["reason"]) == (ready, reason)


# ---- evicted -----------------------------------------------------------------------------------------


def test_an_eviction_deletes_the_gang_without_charging_the_backoff_limit_then_gives_the_quota_back():
    job = queued_job(JobBuilder().run_policy(backoffLimit=0))
    evicted = workload(job, RESERVED, ADMITTED, PREEMPTED, admission=ADMISSION)
    stop = plan(job, RUNNING, [pod(0), pod(1)], body=evicted)
    assert deleted(stop) == [("train-rank-0", "Evicted"), ("train-rank-1", "Evicted")]
    assert (stop.status["phase"], stop.status["reason"]) == ("Queued", "Evicted")
    assert stop.status["failureRestarts"] == 0 and stop.status["restarts"] == 0
    assert stop.status["kueue"]["evictions"] == 1
    assert [(e.type, e.reason) for e in stop.events] == [("Warning", "Evicted")]
    assert (condition(stop, "Admitted")["status"], condition(stop, "Admitted")["reason"]) == ("False", "Preempted")
    assert kueue_writes(stop) == []                         # the quota stays held while a rank pod runs

    terminating = plan(job, stop.status, [pod(0, deleting=True)], body=evicted)
    assert kueue_writes(terminating) == [] and terminating.events == []

    gone = plan(job, stop.status, [], body=evicted)
    [(why, to_status, patch)] = kueue_writes(gone)
    assert (why, to_status) == ("requeued", True) and patch["status"]["admission"] is None
    by_type = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (by_type["Requeued"]["status"], by_type["QuotaReserved"]["status"]) == ("True", "False")
    assert gone.events == [] and gone.status["kueue"]["evictions"] == 1


def test_an_evicted_job_waits_then_resumes_in_the_same_gang_generation():
    job = queued_job()
    evicted_status = plan(job, RUNNING, [], body=workload(job, RESERVED, ADMITTED, PREEMPTED, admission=ADMISSION)
                          ).status
    requeued = workload(job, PENDING, cond("Evicted", True, "Preempted", "preempted"),
                        cond("Requeued", True, "Preempted", "preempted"))
    waiting = plan(job, evicted_status, [], body=requeued)
    assert (waiting.status["phase"], waiting.status["reason"]) == ("Queued", "Evicted") and waiting.events == []
    assert not any(isinstance(a, CreatePods) for a in waiting.actions)
    readmitted = workload(job, RESERVED, ADMITTED, cond("Evicted", False, "QuotaReserved"), admission=ADMISSION)
    back = plan(job, waiting.status, [], body=readmitted)
    assert [a.indexes for a in back.actions if isinstance(a, CreatePods)] == [(0, 1)]
    assert back.status["restarts"] == 0 and "Admitted" in [e.reason for e in back.events]


# ---- the Workload ends with the job ----------------------------------------------------------------------


@pytest.mark.parametrize("status, pods, finished_reason", [
    ({"phase": "Running", "restarts": 0}, [pod(0, "Succeeded"), pod(1, "Succeeded")], "Succeeded"),
    ({"phase": "Running", "restarts": 0, "failureRestarts": 0}, [pod(0), pod(1, "Failed", exit_code=1)], "Failed"),
])
def test_a_finished_job_finishes_its_workload_then_lets_it_go(status, pods, finished_reason):
    job = queued_job(JobBuilder().run_policy(restartPolicy="Never"))
    body = workload(job, RESERVED, ADMITTED, admission=ADMISSION)
    p = plan(job, status, pods, body=body)
    assert p.status["phase"] in ("Succeeded", "Failed")
    [(why, to_status, patch)] = kueue_writes(p)
    finished = next(c for c in patch["status"]["conditions"] if c["type"] == "Finished")
    assert (why, to_status, finished["status"], finished["reason"]) == ("finished", True, "True", finished_reason)
    done = workload(job, RESERVED, ADMITTED, cond("Finished", True, finished_reason), admission=ADMISSION)
    later = plan(job, p.status, [q for q in pods if q.phase != "Running"], body=done)
    assert kueue_writes(later) == [("released", False, {"metadata": {"resourceVersion": "42", "finalizers": []}})]


def test_an_admission_the_pods_cannot_take_fails_the_job_as_failed_to_start():
    job = queued_job(JobBuilder().node_selector({"cloud.example.com/spot": "false"}))
    p = plan(job, {"phase": "Queued", "reason": "Queued", "restarts": 0},
             body=workload(job, RESERVED, ADMITTED, admission=ADMISSION))
    assert (p.status["phase"], p.status["reason"]) == ("Failed", "FailedToStart")
    assert "cloud.example.com/spot=true" in p.status["message"]
    [(_, _, patch)] = kueue_writes(p)
    finished = next(c for c in patch["status"]["conditions"] if c["type"] == "Finished")
    assert finished["reason"] == "FailedToStart"


def test_a_deleted_workload_stops_the_gang_and_is_let_go_once_the_pods_are_gone():
    job = queued_job()
    body = workload(job, RESERVED, ADMITTED, admission=ADMISSION, deleting=True)
    p = plan(job, RUNNING, [pod(0), pod(1)], body=body)
    assert deleted(p) == [("train-rank-0", "Queued"), ("train-rank-1", "Queued")]
    assert condition(p, "Admitted")["reason"] == "WorkloadDeleted" and kueue_writes(p) == []
    gone = plan(job, p.status, [], body=body)
    assert [w[0] for w in kueue_writes(gone)] == ["released"]
    assert plan(job, gone.status, []).actions == [EnsureKueueWorkload()]  # then a new one is queued


# ---- a Workload that no longer describes the job ---------------------------------------------------------


@pytest.mark.parametrize("changed", [
    pytest.param(lambda: queued_job(JobBuilder().replicas(3)), id="resized"),
    pytest.param(lambda: queued_job(queue="team-b"), id="moved to another LocalQueue"),
])
def test_a_workload_that_no_longer_describes_a_waiting_job_is_replaced(changed):
    body = workload(queued_job(), PENDING)
    p = plan(changed(), {"phase": "Queued", "reason": "Queued", "restarts": 0}, body=body)
    assert [type(a) for a in p.actions] == [PatchKueueWorkload, DeleteKueueWorkload]
    assert condition(p, "Admitted")["reason"] == "WorkloadChanged"


def test_a_job_resized_while_admitted_stops_before_its_workload_is_replaced():
    body = workload(queued_job(), RESERVED, ADMITTED, admission=ADMISSION)
    resized = queued_job(JobBuilder().replicas(3))
    p = plan(resized, RUNNING, [pod(0), pod(1)], body=body)
    assert deleted(p) == [("train-rank-0", "Queued"), ("train-rank-1", "Queued")]
    assert not any(isinstance(a, (DeleteKueueWorkload, CreatePods)) for a in p.actions)
    gone = plan(resized, p.status, [], body=body)
    assert [type(a) for a in gone.actions] == [PatchKueueWorkload, DeleteKueueWorkload]


def test_a_queue_label_changed_while_admitted_waits_for_the_next_queueing():
    body = workload(queued_job(), RESERVED, ADMITTED, admission=ADMISSION)
    p = plan(queued_job(queue="team-b"), RUNNING, [pod(0), pod(1)], body=body)
    assert not any(isinstance(a, (DeletePods, DeleteKueueWorkload)) for a in p.actions)


def test_without_the_queue_label_and_without_a_workload_the_job_runs_as_any_other():
    job = queued_job(queue=None)
    p = plan(job, absent=True)
    assert any(isinstance(a, CreatePods) for a in p.actions) and "kueue" not in p.status


# ---- suspension -------------------------------------------------------------------------------------


def test_a_suspended_job_deactivates_its_workload_and_a_resumed_one_activates_it_again():
    job = queued_job(JobBuilder().run_policy(suspend=True))
    p = plan(job, RUNNING, [pod(0), pod(1)], body=workload(job, RESERVED, ADMITTED, admission=ADMISSION))
    assert p.status["phase"] == "Suspended" and len(deleted(p)) == 2
    assert kueue_writes(p) == [("suspended", False, {
        "metadata": {"resourceVersion": "42", "annotations": {"dpjob.io/deactivated-for-suspend": "true"}},
        "spec": {"active": False}})]
    deactivated = workload(job, PENDING, annotations={"dpjob.io/deactivated-for-suspend": "true"})
    deactivated["spec"]["active"] = False
    resumed = queued_job()
    back = plan(resumed, p.status, [], body=deactivated)
    assert kueue_writes(back) == [("resumed", False, {
        "metadata": {"resourceVersion": "42", "annotations": {"dpjob.io/deactivated-for-suspend": None}},
        "spec": {"active": True}})]
    assert back.status["phase"] == "Queued"


def test_a_workload_kueue_itself_deactivated_is_not_activated_by_the_operator():
    job = queued_job()
    body = workload(job, PENDING)
    body["spec"]["active"] = False
    assert kueue_writes(plan(job, {"phase": "Queued", "reason": "Queued", "restarts": 0}, body=body)) == []


@pytest.mark.parametrize("reason", ["KueueWorkloadNameConflict", "PriorityClassNotFound"])
def test_why_the_workload_cannot_be_made_stays_in_the_status_while_the_operator_retries(reason):
    job = queued_job()
    status = {"phase": "Queued", "reason": "Queued", "restarts": 0,
              "conditions": [{"type": "Admitted", "status": "False", "reason": reason, "message": "why",
                              "lastTransitionTime": EARLIER}]}
    p = plan(job, status)
    assert p.actions == [EnsureKueueWorkload()]
    assert (condition(p, "Admitted")["reason"], p.status["message"]) == (reason, "why") and p.events == []


def test_a_resumed_job_whose_workload_kueue_reactivated_is_queued_not_evicted():
    job = queued_job()
    suspended = {"phase": "Suspended", "reason": "Suspended", "restarts": 0, "kueue": {"workload": "w", "queue": "q"},
                 "conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended", "message": "",
                                 "lastTransitionTime": EARLIER}]}
    reactivated = workload(job, PENDING, cond("Evicted", True, "Deactivated", "The workload is deactivated"),
                           cond("Requeued", True, "Reactivated", "The workload was reactivated"))
    p = plan(job, suspended, body=reactivated)
    assert (p.status["phase"], p.status["reason"]) == ("Queued", "Queued")
    assert "evictions" not in p.status["kueue"]
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "Resumed"), ("Normal", "Queued")]
    again = plan(job, p.status, body=reactivated)
    assert again.events == [] and again.status["reason"] == "Queued"
