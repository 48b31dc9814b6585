"""What an admission does to a rank pod, and the Workload writes that depend on nothing but the Workload
and the pods: (de)activation for a suspension, the finalizer of a deleted job's Workload. No cluster."""

from __future__ import annotations

import pytest

from dpjob_operator.api import kueue as k
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.builders.kueue_status import activation_patch
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.reconcile.kueue_sync import orphan_finalizer_patch
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
SPOT = {"key": "cloud.example.com/spot", "operator": "Exists", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ADMISSION = k.Placement(node_selector={"cloud.example.com/gpu": "a100"}, tolerations=(SPOT, GPU_TOLERATION),
                        labels={"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "team-a",
                                "dpjob.io/rank": "99"},
                        annotations={"kueue.x-k8s.io/workload": "dataparalleljob-train-6857e"}, count=2)


def test_an_admitted_rank_pod_carries_the_flavors_placement_and_kueues_labels():
    job = JobBuilder().accelerator("gpu").node_selector({"zone": "a"}).job()
    plain = build_rank_pod(job, 1, 0, DEFAULT_POOLS["gpu"])
    admitted = build_rank_pod(job, 1, 0, DEFAULT_POOLS["gpu"], admission=ADMISSION)
    assert admitted["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true", "zone": "a",
                                                "cloud.example.com/gpu": "a100"}
    assert admitted["spec"]["tolerations"] == [GPU_TOLERATION, SPOT]       # the pool's toleration once
    labels = admitted["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/podset"] == "main" and labels["kueue.x-k8s.io/local-queue-name"] == "team-a"
    assert labels["dpjob.io/rank"] == "1"                                   # the rank's own labels win
    assert admitted["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "dataparalleljob-train-6857e"
    # nothing else differs from the pod a job without Kueue gets
    for key in ("containers", "hostname", "subdomain", "restartPolicy"):
        assert admitted["spec"][key] == plain["spec"][key]


def workload(active=True, annotations=None, deleting=False, finalizers=("kueue.x-k8s.io/resource-in-use",),
             owner="uid-train"):
    meta = {"name": "dataparalleljob-train-6857e", "namespace": "ns", "resourceVersion": "9",
            "finalizers": list(finalizers), "annotations": dict(annotations or {}),
            "ownerReferences": [{"kind": "DataParallelJob", "name": "train", "uid": owner, "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-03-21T16:00:00Z"
    return {"metadata": meta, "spec": {"active": active, "queueName": "team-a"}}


OURS = {"dpjob.io/deactivated-for-suspend": "true"}


@pytest.mark.parametrize("body, suspended, expected_active", [
    (workload(), True, False),                              # suspended: deactivated, and marked so
    (workload(active=False, annotations=OURS), True, None),  # already
    (workload(active=False, annotations=OURS), False, True),  # resumed: activated again
    (workload(active=False), False, None),                   # Kueue deactivated it (max execution time): left so
    (workload(), False, None),
])
def test_a_suspension_deactivates_the_workload_and_only_the_operators_deactivation_is_undone(body, suspended,
                                                                                             expected_active):
    patch = activation_patch(body, suspended)
    if expected_active is None:
        assert patch is None
    else:
        assert patch is not None and patch["spec"] == {"active": expected_active}
        assert patch["metadata"]["resourceVersion"] == "9"


@pytest.mark.parametrize("body, pods, released", [
    (workload(deleting=True), [], True),
    (workload(deleting=True), [pod(0, deleting=True)], False),             # still terminating: still in use
    (workload(deleting=True), [pod(0, "Failed", deleting=True)], True),    # done: holds nothing
    (workload(deleting=True), [pod(0, owner_uid="uid-new-train")], True),  # a newer namesake's pod
    (workload(), [], False),                                               # not being deleted
    (workload(deleting=True, finalizers=()), [], False),                   # nothing to drop
])
def test_a_deleted_jobs_workload_is_let_go_once_none_of_its_pods_holds_resources(body, pods, released):
    patch = orphan_finalizer_patch(body, pods)
    assert (patch is not None) is released
    if released:
        assert patch == {"metadata": {"resourceVersion": "9", "finalizers": []}}
