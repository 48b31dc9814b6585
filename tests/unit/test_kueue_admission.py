"""What Kueue's verdict on a job's Workload means for its rank pods: where they go once admitted,
and whether the gang waits, runs or stops. Table-driven, no cluster."""

from __future__ import annotations

import pytest

from dpjob_operator.api import kueue as k
from dpjob_operator.reconcile.kueue_admission import (
    MissingFlavor,
    Placement,
    PlacementConflict,
    Run,
    Stop,
    Wait,
    admission_decision,
    placement,
)

pytestmark = pytest.mark.unit

SPOT_TOLERATION = {"key": "cloud.example.com/spot", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = {
    "default-flavor": k.Flavor(),
    "a100": k.parse_flavor({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                            "metadata": {"name": "a100"},
                            "spec": {"nodeLabels": {"cloud.example.com/gpu": "a100"},
                                     "nodeTaints": [{"key": "cloud.example.com/spot", "value": "true",
                                                     "effect": "NoSchedule"}],
                                     "tolerations": [SPOT_TOLERATION]}}),
    "zone-b": k.Flavor(node_labels={"topology.kubernetes.io/zone": "b"}),
    "other-gpu": k.Flavor(node_labels={"cloud.example.com/gpu": "h100"}),
}
POOL_SELECTOR = {"nvidia.com/gpu.present": "true"}
RESERVED = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
            "message": "Quota reserved in ClusterQueue cluster-queue", "lastTransitionTime": "2026-03-21T15:00:00Z"}
ADMITTED = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
            "lastTransitionTime": "2026-03-21T15:00:00Z"}


def admitted(flavors=None, cluster_queue="cluster-queue", checks=(), conditions=(RESERVED, ADMITTED), **meta):
    assignment = {"name": "main", "count": 4, "flavors": flavors or {"cpu": "default-flavor", "nvidia.com/gpu": "a100"},
                  "resourceUsage": {"cpu": "64", "nvidia.com/gpu": "32"}}
    return k.parse_workload({
        "metadata": {"name": "dataparalleljob-resnet-f0aac", **meta}, "spec": {"queueName": "team-a"},
        "status": {"admission": {"clusterQueue": cluster_queue, "podSetAssignments": [assignment]},
                   "admissionChecks": list(checks), "conditions": list(conditions)}})


def status(*conditions, **extra):
    return k.parse_workload({"metadata": {"name": "dataparalleljob-resnet-f0aac"}, "spec": {"queueName": "team-a"},
                             "status": {"conditions": list(conditions), **extra}})


# ---- placement ---------------------------------------------------------------------------------


def test_an_admission_adds_the_flavors_node_labels_tolerations_and_kueues_labels():
    got = placement(admitted(), FLAVORS, POOL_SELECTOR)
    assert got == Placement(
        node_selector={"cloud.example.com/gpu": "a100"},
        tolerations=(SPOT_TOLERATION,),
        labels={"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "team-a",
                "kueue.x-k8s.io/cluster-queue-name": "cluster-queue"},
        annotations={"kueue.x-k8s.io/workload": "dataparalleljob-resnet-f0aac"},
        count=4)


@pytest.mark.parametrize("flavors, pod_selector, expected_selector", [
    ({"cpu": "default-flavor"}, POOL_SELECTOR, {}),                       # a flavor without labels adds nothing
    ({"cpu": "zone-b", "nvidia.com/gpu": "a100"}, POOL_SELECTOR,          # one podSet, two flavors: both apply
     {"cloud.example.com/gpu": "a100", "topology.kubernetes.io/zone": "b"}),
    ({"nvidia.com/gpu": "a100"}, {"cloud.example.com/gpu": "a100"}, {}),  # the pods already select it
])
def test_node_labels_are_anded_into_what_the_pods_select(flavors, pod_selector, expected_selector):
    got = placement(admitted(flavors), FLAVORS, pod_selector)
    assert isinstance(got, Placement) and got.node_selector == expected_selector


@pytest.mark.parametrize("flavors, pod_selector, key, culprit, advice", [
    # the job selects h100 nodes but Kueue admitted it on the a100 flavor
    ({"nvidia.com/gpu": "a100"}, {"cloud.example.com/gpu": "h100"}, "cloud.example.com/gpu", "ResourceFlavor 'a100'",
     "drop cloud.example.com/gpu from spec.template.spec.nodeSelector"),
    # two flavors of one podSet disagree (Kueue would pick either at random)
    ({"cpu": "other-gpu", "nvidia.com/gpu": "a100"}, {}, "cloud.example.com/gpu", "ResourceFlavor 'other-gpu'",
     "ask its administrator"),
])
def test_a_flavor_that_contradicts_the_pods_is_a_conflict_the_user_can_act_on(flavors, pod_selector, key, culprit,
                                                                             advice):
    got = placement(admitted(flavors), FLAVORS, pod_selector)
    assert isinstance(got, PlacementConflict) and got.key == key
    assert culprit in got.message and advice in got.message


def test_admission_check_updates_are_merged_and_their_conflicts_refused():
    dws = {"name": "dws-prov", "state": "Ready", "message": "", "podSetUpdates": [
        {"name": "main", "annotations": {"cluster-autoscaler.kubernetes.io/consume-provisioning-request": "pr-1"},
         "nodeSelector": {"autoscaling.x-k8s.io/provisioning-class": "dws"},
         "tolerations": [SPOT_TOLERATION, {"key": "dws", "operator": "Exists"}]}]}
    got = placement(admitted(checks=[dws]), FLAVORS, POOL_SELECTOR)
    assert isinstance(got, Placement)
    assert got.node_selector == {"cloud.example.com/gpu": "a100", "autoscaling.x-k8s.io/provisioning-class": "dws"}
    assert got.tolerations == (SPOT_TOLERATION, {"key": "dws", "operator": "Exists"})   # no duplicate
    assert got.annotations["cluster-autoscaler.kubernetes.io/consume-provisioning-request"] == "pr-1"

    bad = {**dws, "podSetUpdates": [{"name": "main", "nodeSelector": {"cloud.example.com/gpu": "h100"}}]}
    refused = placement(admitted(checks=[bad]), FLAVORS, POOL_SELECTOR)
    assert isinstance(refused, PlacementConflict) and "admission check 'dws-prov'" in refused.message


def test_a_flavor_not_read_yet_is_asked_for_by_name():
    assert placement(admitted({"nvidia.com/gpu": "a100"}), {}, POOL_SELECTOR) == MissingFlavor("a100")


def test_a_cluster_queue_name_that_is_no_label_value_gets_no_label():
    got = placement(admitted(cluster_queue="Team_A.Queue"), FLAVORS, POOL_SELECTOR)
    assert isinstance(got, Placement) and "kueue.x-k8s.io/cluster-queue-name" not in got.labels


# ---- the decision ------------------------------------------------------------------------------

PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
           "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                      "flavor a100, 16 more needed"}
INADMISSIBLE = {"type": "QuotaReserved", "status": "False", "reason": "Inadmissible",
                "message": "LocalQueue team-a doesn't exist"}


def evicted_condition(reason, message):
    return {"type": "Evicted", "status": "True", "reason": reason, "message": message}


@pytest.mark.parametrize("state, expected", [
    (status(), Wait("Queued", "waiting for Kueue to reserve quota through LocalQueue 'team-a'")),
    (status(PENDING), Wait("Pending", PENDING["message"])),
    (status(INADMISSIBLE), Wait("Inadmissible", "LocalQueue team-a doesn't exist")),
    (admitted(conditions=[RESERVED], checks=[{"name": "dws-prov", "state": "Pending", "message": "provisioning"}]),
     Wait("AdmissionChecksPending", "quota reserved in ClusterQueue cluster-queue, waiting for admission checks: "
                                    "dws-prov (Pending: provisioning)")),
])
def test_a_job_waits_with_kueues_reason_until_admitted(state, expected):
    assert admission_decision(state, FLAVORS, POOL_SELECTOR) == expected


def test_an_admitted_job_runs_where_kueue_placed_it():
    decision = admission_decision(admitted(), FLAVORS, POOL_SELECTOR)
    assert isinstance(decision, Run) and decision.placement.node_selector == {"cloud.example.com/gpu": "a100"}


@pytest.mark.parametrize("reason, message", [
    ("Preempted", "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the "
                  "ClusterQueue"),
    ("PodsReadyTimeout", "Exceeded the PodsReady timeout team-a/dataparalleljob-resnet-f0aac"),
    ("ClusterQueueStopped", "The ClusterQueue is stopped"),
    ("DeactivatedDueToMaximumExecutionTimeExceeded", "exceeding the maximum execution time"),
])
def test_an_eviction_stops_the_gang_and_says_why(reason, message):
    state = admitted(conditions=[RESERVED, ADMITTED, evicted_condition(reason, message)])
    assert admission_decision(state, FLAVORS, POOL_SELECTOR) == Stop(reason, message, requeue=True)


@pytest.mark.parametrize("requeued, extra, expected_tail", [
    ({"type": "Requeued", "status": "True", "reason": "Preempted"}, {}, "requeued: " + PENDING["message"]),
    (None, {}, "requeued: " + PENDING["message"]),              # Kueue's docs show no Requeued condition
    ({"type": "Requeued", "status": "False", "reason": "PodsReadyTimeout"},
     {"requeueState": {"count": 1, "requeueAt": "2026-03-21T16:00:00Z"}},
     "not requeued yet (backoff until 2026-03-21T16:00:00Z)"),
])
def test_once_the_quota_is_given_back_the_evicted_job_waits(requeued, extra, expected_tail):
    conditions = [PENDING, evicted_condition("Preempted", "preempted"), *([requeued] if requeued else [])]
    decision = admission_decision(status(*conditions, **extra), FLAVORS, POOL_SELECTOR)
    assert isinstance(decision, Wait) and decision.reason == "Preempted"
    assert decision.message == f"evicted (Preempted: preempted), {expected_tail}"


@pytest.mark.parametrize("state, expected", [
    (admitted(deletionTimestamp="2026-03-21T15:00:00Z"), Stop("WorkloadDeleted", "Workload is deleted")),
    (status({"type": "Finished", "status": "True", "reason": "FailedToStart", "message": "conflict"}),
     Stop("FailedToStart", "conflict")),
])
def test_a_deleted_or_finished_workload_stops_the_gang(state, expected):
    assert admission_decision(state, FLAVORS, POOL_SELECTOR) == expected


def test_an_admission_the_pods_cannot_take_stops_the_job_as_failed_to_start():
    decision = admission_decision(admitted(), FLAVORS, {"cloud.example.com/gpu": "h100"})
    assert isinstance(decision, Stop) and decision.reason == "FailedToStart" and not decision.requeue
    assert "cloud.example.com/gpu=a100" in decision.message and "cloud.example.com/gpu=h100" in decision.message


def test_an_admitted_job_with_an_unread_flavor_asks_for_it():
    assert admission_decision(admitted(), {}, POOL_SELECTOR) == MissingFlavor("a100")
