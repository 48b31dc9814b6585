"""The Kueue Workload of a DataParallelJob: its name, its podSet, its owner and priority, the patches
the operator writes to its status, and the typed view of what Kueue wrote. No cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dpjob_operator.api import kueue as k
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.spec import parse_job
from dpjob_operator.builders import kueue_status as ks
from dpjob_operator.builders.kueue_workload import (
    build_workload,
    default_priority,
    priority_class_to_read,
    workload_matches,
)
from tests.support.builders import JobBuilder

pytestmark = pytest.mark.unit
NOW = datetime(2026, 3, 21, 15, 50, 0, tzinfo=UTC)
UID = "6f1c2a7e-3b9d-4c51-9e0a-2d8f4b7c1e35"
LONG_NAME = ("resnet50-imagenet-ddp-sweep-learning-rate-warmup-cosine-decay"
             + "-0123456789-abcdefghij-klmnopqrstuvwxyz" * 5)   # 256 characters
KUEUE_TEST_NAME = ("marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-"
                   "social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-"
                   "lead-senior-architect-validation-checked-approved-by-legal-and-ops-dept")


def queued(builder: JobBuilder, labels=None, annotations=None, queue="team-a"):
    """The parsed job, labelled for Kueue (``queue``: its LocalQueue)."""
    body = builder.served()
    meta = body["metadata"]
    meta["labels"] = {**({k.LABEL_QUEUE_NAME: queue} if queue else {}), **(labels or {})}
    meta["annotations"] = dict(annotations or {})
    return parse_job(body)


# ---- the Workload's name ---------------------------------------------------------------------


@pytest.mark.parametrize("owner, uid, kind, group, limit, expected", [
    # Kueue v0.17.0's own cases (pkg/controller/jobframework/workload_names_test.go)
    ("name", "uid", "Job", "batch", 253, "job-name-ef3a1"),
    (KUEUE_TEST_NAME, "uid", "Job", "batch", 253, "job-" + KUEUE_TEST_NAME[:243] + "-218b8"),
    (KUEUE_TEST_NAME, "uid", "Job", "batch", 63, "job-marketing-campaign-autumn-2024-region-north-america-d-218b8"),
])
def test_the_name_algorithm_gives_kueues_own_test_vectors(owner, uid, kind, group, limit, expected):
    assert k.owner_workload_name(owner, uid, kind, group, limit) == expected


@pytest.mark.parametrize("name, uid, short, expected", [
    # Computed with the algorithm of workload_names.go transcribed to Go (crypto/sha1), not with this code.
    ("resnet", UID, False, "dataparalleljob-resnet-f0aac"),
    ("resnet", "uid-resnet", False, "dataparalleljob-resnet-df42b"),
    ("resnet", UID, True, "dataparalleljob-resnet-f0aac"),   # short enough either way
    (LONG_NAME, UID, False, "dataparalleljob-" + LONG_NAME[:231] + "-e08ec"),          # cut at 253
    (LONG_NAME, UID, True, "dataparalleljob-resnet50-imagenet-ddp-sweep-learning-rate-e08ec"),  # cut at 63
])
def test_a_jobs_workload_is_named_as_kueue_names_it(name, uid, short, expected):
    got = k.workload_name(name, uid, short)
    assert got == expected
    assert len(got) <= (63 if short else 253)


def test_the_name_changes_with_the_uid_so_a_recreated_job_gets_a_new_workload():
    assert k.workload_name("resnet", "uid-1") != k.workload_name("resnet", "uid-2")


def test_the_external_framework_entry_is_kind_version_group():
    assert k.EXTERNAL_FRAMEWORK == "DataParallelJob.v1alpha1.dpjob.io"


# ---- the Workload ----------------------------------------------------------------------------


def gpu_job(**kw):
    return queued(JobBuilder("resnet", "team-a").accelerator("gpu").replicas(4).procs(8)
                  .requests(cpu="16", memory="64Gi").node_selector({"zone": "a"}), **kw)


def test_the_workload_is_owned_by_the_job_queued_where_it_asks_and_holds_kueues_finalizer():
    job = gpu_job()
    wl = build_workload(job, DEFAULT_POOLS["gpu"])
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2" and wl["kind"] == "Workload"
    assert wl["metadata"] == {
        "name": k.workload_name("resnet", "uid-resnet"), "namespace": "team-a",
        # Kueue's job-uid label, and the job's own: the operator watches its Workloads by them
        "labels": {"kueue.x-k8s.io/job-uid": "uid-resnet", "dpjob.io/job-name": "resnet",
                   "app.kubernetes.io/managed-by": "dpjob-operator"},
        "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        "ownerReferences": [{"apiVersion": "dpjob.io/v1alpha1", "kind": "DataParallelJob", "name": "resnet",
                             "uid": "uid-resnet", "controller": True, "blockOwnerDeletion": True}]}
    assert wl["spec"]["queueName"] == "team-a"
    assert wl["spec"]["priority"] == 0 and "priorityClassRef" not in wl["spec"]


def test_one_pod_set_named_main_with_every_rank_and_the_requests_the_rank_pods_carry():
    wl = build_workload(gpu_job(), DEFAULT_POOLS["gpu"])
    [pod_set] = wl["spec"]["podSets"]
    assert pod_set["name"] == "main" and pod_set["count"] == 4
    spec = pod_set["template"]["spec"]
    [trainer] = spec["containers"]
    assert trainer["resources"] == {"requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"},
                                    "limits": {"nvidia.com/gpu": "8"}}
    # placement as the rank pods have it: the pool's selector and toleration plus the user's
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true", "zone": "a"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_the_template_carries_nothing_that_differs_between_ranks_or_generations():
    job = queued(JobBuilder("resnet").accelerator("gpu").set("placement", {"topologyKey": "rack"}))
    template = build_workload(job, DEFAULT_POOLS["gpu"])["spec"]["podSets"][0]["template"]
    assert set(template) == {"metadata", "spec"} and set(template["metadata"]) == {"labels", "annotations"}
    assert "dpjob.io/rank" not in template["metadata"]["labels"]
    assert "dpjob.io/restart" not in template["metadata"]["labels"]
    assert template["metadata"]["labels"]["dpjob.io/job-name"] == "resnet"
    assert not {"hostname", "subdomain", "schedulingGroup", "volumes"} & set(template["spec"])
    assert "podAffinity" not in template["spec"].get("affinity", {})
    assert set(template["spec"]["containers"][0]) <= {"name", "image", "resources", "ports", "restartPolicy"}


def test_the_same_job_always_gives_the_same_workload():
    assert build_workload(gpu_job(), DEFAULT_POOLS["gpu"]) == build_workload(gpu_job(), DEFAULT_POOLS["gpu"])


@pytest.mark.parametrize("priority, expected_ref, expected_value", [
    (None, None, 0),
    (k.Priority(1000, "WorkloadPriorityClass", "high"),
     {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}, 1000),
    (k.Priority(50, "PriorityClass", "batch-low"),
     {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "batch-low"}, 50),
])
def test_priority_is_written_as_a_class_reference_and_its_value(priority, expected_ref, expected_value):
    spec = build_workload(gpu_job(), DEFAULT_POOLS["gpu"], priority)["spec"]
    assert spec.get("priorityClassRef") == expected_ref and spec["priority"] == expected_value


@pytest.mark.parametrize("labels, pod_class, expected", [
    ({k.LABEL_PRIORITY_CLASS: "high"}, "batch-low", ("WorkloadPriorityClass", "high")),   # the label wins
    ({}, "batch-low", ("PriorityClass", "batch-low")),
    ({}, None, ("PriorityClass", None)),                                                  # the global default
])
def test_the_class_to_read_is_the_label_then_the_pod_template_then_the_default(labels, pod_class, expected):
    builder = JobBuilder("resnet")
    if pod_class:
        builder.set("template.spec.priorityClassName", pod_class)
    assert priority_class_to_read(queued(builder, labels=labels)) == expected


@pytest.mark.parametrize("classes, expected", [
    ([], k.Priority()),
    ([{"metadata": {"name": "normal"}, "value": 100}], k.Priority()),
    ([{"metadata": {"name": "a"}, "value": 100, "globalDefault": True},
      {"metadata": {"name": "b"}, "value": 10, "globalDefault": True}], k.Priority(10, "PriorityClass", "b")),
])
def test_without_a_class_the_lowest_global_default_applies(classes, expected):
    assert default_priority(classes) == expected


@pytest.mark.parametrize("labels, expected", [
    ({k.LABEL_MAX_EXEC_TIME_SECONDS: "3600"}, 3600),
    ({k.LABEL_MAX_EXEC_TIME_SECONDS: "0"}, None),
    ({k.LABEL_MAX_EXEC_TIME_SECONDS: "an hour"}, None),
    ({}, None),
])
def test_a_max_execution_time_label_becomes_the_workloads_limit(labels, expected):
    spec = build_workload(gpu_job(labels=labels), DEFAULT_POOLS["gpu"])["spec"]
    assert spec.get("maximumExecutionTimeSeconds") == expected


def test_only_provisioning_request_annotations_are_copied():
    annotations = {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600", "team": "vision"}
    meta = build_workload(gpu_job(annotations=annotations), DEFAULT_POOLS["gpu"])["metadata"]
    assert meta["annotations"] == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600"}


@pytest.mark.parametrize("change, matches", [
    (lambda b: b, True),
    (lambda b: b.replicas(8), False),                              # a resize needs a new Workload
    (lambda b: b.requests(cpu="32", memory="64Gi"), False),
    (lambda b: b.user_env(LR="0.1"), True),                        # env is not admission's business
])
def test_an_existing_workload_matches_until_the_job_changes_what_kueue_admits(change, matches):
    def builder():
        return (JobBuilder("resnet").accelerator("gpu").replicas(4).requests(cpu="16", memory="64Gi"))
    existing = build_workload(queued(builder()), DEFAULT_POOLS["gpu"])
    desired = build_workload(queued(change(builder())), DEFAULT_POOLS["gpu"])
    assert workload_matches(existing, desired) is matches


# ---- what Kueue writes, read back --------------------------------------------------------------
# Shapes from Kueue v0.17.0's site/content/en/docs/tasks/troubleshooting/troubleshooting_jobs.md and
# the messages of its scheduler (flavorassigner.go) and workload controller.

PENDING_STATUS = {"conditions": [{
    "lastTransitionTime": "2024-03-21T13:43:00Z", "reason": "Pending", "status": "False", "type": "QuotaReserved",
    "message": "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor "
               "in ClusterQueue"}],
    "resourceRequests": [{"name": "main", "resources": {"cpu": "3", "memory": "600Mi"}}]}
ADMITTED_STATUS = {
    "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": [{
        "count": 3, "flavors": {"cpu": "default-flavor", "memory": "default-flavor"}, "name": "main",
        "resourceUsage": {"cpu": "3", "memory": "600Mi"}}]},
    "conditions": [
        {"lastTransitionTime": "2024-03-19T20:49:17Z", "message": "Quota reserved in ClusterQueue cluster-queue",
         "reason": "QuotaReserved", "status": "True", "type": "QuotaReserved"},
        {"lastTransitionTime": "2024-03-19T20:49:17Z", "message": "The workload is admitted",
         "reason": "Admitted", "status": "True", "type": "Admitted"}]}
EVICTED_CONDITION = {"lastTransitionTime": "2026-03-21T15:49:55Z", "reason": "Preempted", "status": "True",
                     "type": "Evicted", "message": "Preempted to accommodate a workload (UID: u1, JobUID: j1) "
                                                   "due to prioritization in the ClusterQueue"}


def workload(status, **meta):
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "dataparalleljob-resnet-f0aac", "namespace": "team-a", "generation": 1,
                         "resourceVersion": "4711", **meta},
            "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 3}]}, "status": status}


def evicted(reason="Preempted", message=EVICTED_CONDITION["message"]):
    status = {**ADMITTED_STATUS, "conditions": [*ADMITTED_STATUS["conditions"],
                                                {**EVICTED_CONDITION, "reason": reason, "message": message}]}
    return workload(status)


@pytest.mark.parametrize("obj, admitted, reserved, evicted_reason, finished", [
    ({}, False, False, None, None),                                   # nothing at all yet
    (workload({}), False, False, None, None),                         # not attempted (StrictFIFO)
    (workload(PENDING_STATUS), False, False, None, None),
    (workload(ADMITTED_STATUS), True, True, None, None),
    (evicted("PodsReadyTimeout", "Exceeded the PodsReady timeout team-a/x"), True, True, "PodsReadyTimeout", None),
    (workload({"conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done"}]}),
     False, False, None, "Succeeded"),
])
def test_a_workload_status_reads_as_kueue_means_it(obj, admitted, reserved, evicted_reason, finished):
    state = k.parse_workload(obj)
    assert state.admitted is admitted and state.quota_reserved is reserved
    assert (state.evicted.reason if state.evicted else None) == evicted_reason
    assert (state.finished.reason if state.finished else None) == finished


def test_the_admission_reads_as_flavors_and_count_per_pod_set():
    state = k.parse_workload(workload(ADMITTED_STATUS))
    assert state.cluster_queue == "cluster-queue" and state.queue_name == "team-a"
    [main] = state.pod_sets
    assert (main.name, main.count, main.flavor_names) == ("main", 3, ("default-flavor",))
    assert main.flavors == {"cpu": "default-flavor", "memory": "default-flavor"}
    assert main.resource_usage == {"cpu": "3", "memory": "600Mi"}


def test_the_pending_reason_keeps_kueues_words():
    reserved = k.parse_workload(workload(PENDING_STATUS)).conditions["QuotaReserved"]
    assert reserved.reason == "Pending" and "insufficient quota for cpu" in reserved.message


def test_requeue_state_and_admission_check_updates_are_read():
    status = {"requeueState": {"count": 2, "requeueAt": "2026-03-21T16:00:00Z"},
              "admissionChecks": [{"name": "dws-prov", "state": "Ready", "message": "", "podSetUpdates": [
                  {"name": "main", "nodeSelector": {"autoscaling.x-k8s.io/provisioning-class": "dws"},
                   "annotations": {"cluster-autoscaler.kubernetes.io/consume-provisioning-request": "pr-1"}}]}]}
    state = k.parse_workload(workload(status, deletionTimestamp="2026-03-21T15:00:00Z"))
    assert (state.requeue_count, state.requeue_at, state.deleting) == (2, "2026-03-21T16:00:00Z", True)
    [update] = state.pod_set_updates
    assert (update.check, update.pod_set) == ("dws-prov", "main")
    assert update.node_selector == {"autoscaling.x-k8s.io/provisioning-class": "dws"}


def test_malformed_parts_read_as_absent():
    state = k.parse_workload({"metadata": None, "status": {"conditions": ["junk", {"status": "True"}],
                                                           "admission": {"podSetAssignments": "junk"}}})
    assert state.conditions == {} and state.pod_sets == () and not state.admitted


# ---- what the operator writes to the Workload's status --------------------------------------------


def conditions_of(patch):
    return {cond["type"]: cond for cond in patch["status"]["conditions"]}


@pytest.mark.parametrize("reason, requeued", [
    ("Preempted", "True"), ("NodeFailures", "True"),
    ("PodsReadyTimeout", "False"), ("ClusterQueueStopped", "False"),
    ("DeactivatedDueToRequeuingLimitExceeded", "False"),
])
def test_a_stopped_evicted_gang_gives_its_quota_back_and_is_requeued_only_after_preemption(reason, requeued):
    patch = ks.requeue_patch(evicted(reason, "why"), NOW)
    assert patch["metadata"] == {"resourceVersion": "4711"}          # precondition: the version read
    assert patch["status"]["admission"] is None
    conds = conditions_of(patch)
    assert conds["Requeued"]["status"] == requeued and conds["Requeued"]["reason"] == reason
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"],
            conds["QuotaReserved"]["message"]) == ("False", "Pending", "why")
    assert (conds["Admitted"]["status"], conds["Admitted"]["reason"]) == ("False", "NoReservation")
    assert conds["QuotaReserved"]["lastTransitionTime"] == "2026-03-21T15:50:00Z"
    assert conds["Evicted"] == {**EVICTED_CONDITION, "reason": reason, "message": "why"}  # Kueue's, untouched
    # admitted 2024-03-19T20:49:17Z .. NOW, in whole seconds
    assert patch["status"]["accumulatedPastExecutionTimeSeconds"] == int(
        (NOW - datetime(2024, 3, 19, 20, 49, 17, tzinfo=UTC)).total_seconds())


def test_admission_checks_not_ready_show_in_the_admitted_reason():
    obj = evicted()
    obj["status"]["admissionChecks"] = [{"name": "dws-prov", "state": "Pending", "message": ""}]
    assert conditions_of(ks.requeue_patch(obj, NOW))["Admitted"]["reason"] == "NoReservationUnsatisfiedChecks"


@pytest.mark.parametrize("obj", [workload(ADMITTED_STATUS), workload(PENDING_STATUS), workload({})])
def test_nothing_to_give_back_without_an_eviction_holding_quota(obj):
    assert ks.requeue_patch(obj, NOW) is None


@pytest.mark.parametrize("reason", ["Succeeded", "Failed", "FailedToStart"])
def test_a_finished_job_finishes_its_workload_once(reason):
    patch = ks.finish_patch(workload(ADMITTED_STATUS), reason, "all 4 ranks exited 0", NOW)
    finished = conditions_of(patch)["Finished"]
    assert (finished["status"], finished["reason"], finished["message"]) == ("True", reason, "all 4 ranks exited 0")
    assert finished["observedGeneration"] == 1
    done = workload({"conditions": [finished]})
    assert ks.finish_patch(done, "Failed", "again", NOW) is None


@pytest.mark.parametrize("before, ready, expected", [
    (None, False, ("False", "WaitForStart")),
    (None, True, ("True", "Started")),
    ("Started", False, ("False", "WaitForRecovery")),          # a rank failed after the gang was up
    ("WaitForRecovery", True, ("True", "Recovered")),
])
def test_pods_ready_follows_kueues_wait_for_pods_ready_states(before, ready, expected):
    conditions = list(ADMITTED_STATUS["conditions"])
    if before:
        conditions.append({"type": "PodsReady", "status": "True" if before == "Started" else "False",
                           "reason": before, "message": "", "lastTransitionTime": "2026-03-21T15:00:00Z"})
    patch = ks.pods_ready_patch(workload({**ADMITTED_STATUS, "conditions": conditions}), ready, NOW)
    cond = conditions_of(patch)["PodsReady"]
    assert (cond["status"], cond["reason"]) == expected


def test_pods_ready_is_not_rewritten_when_it_says_the_same():
    conditions = [*ADMITTED_STATUS["conditions"], {"type": "PodsReady", "status": "True", "reason": "Started"}]
    assert ks.pods_ready_patch(workload({**ADMITTED_STATUS, "conditions": conditions}), True, NOW) is None


def test_an_unadmitted_workload_waits_for_start():
    cond = conditions_of(ks.pods_ready_patch(workload(PENDING_STATUS), True, NOW))["PodsReady"]
    assert (cond["status"], cond["reason"]) == ("False", "WaitForStart")


def test_the_finalizer_goes_alone():
    obj = workload({}, finalizers=["example.com/keep", "kueue.x-k8s.io/resource-in-use"])
    assert ks.finalizer_patch(obj) == {"metadata": {"resourceVersion": "4711", "finalizers": ["example.com/keep"]}}
    assert ks.finalizer_patch(workload({})) is None


def test_a_huge_message_is_cut_to_kueues_limit():
    cut = ks.truncate_message("x" * 40000)
    assert len(cut.encode()) == 32 * 1024 and cut.endswith(" ...")
