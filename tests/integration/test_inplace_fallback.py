"""Restart in place on a pool whose kubelets do not declare RestartAllContainersOnContainerExits: the
real kube-scheduler refuses the rank pods' restart rules ("didn't match Pod's required features"), and
the operator runs the job Recreate instead of leaving it Pending for ever."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from devcluster.kwok_pools import PoolSpec, node_manifest
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import wait_pods

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


@pytest.fixture()
def old_kubelet_node(core) -> Iterator[str]:
    """A kwok node of the cpu pool that declares no features (a kubelet older than 1.36, or the gate off)."""
    label = f"old-{uuid.uuid4().hex[:5]}"
    taint = {"key": "dpjob.io/test-node", "value": label, "effect": "NoSchedule"}  # no other test's pods
    manifest = node_manifest(PoolSpec("cpu", 1, {"dpjob.io/pool": "cpu", "dpjob.io/test-node": label}, [taint], {}), 0)
    manifest["metadata"]["name"] = label
    manifest["metadata"]["labels"]["kubernetes.io/hostname"] = label
    del manifest["status"]["declaredFeatures"]
    core.create_node(manifest)
    yield label
    core.delete_node(label)


def test_an_in_place_job_on_kubelets_without_the_feature_runs_recreate(api, core, namespace, operator,
                                                                        old_kubelet_node):
    job = JobBuilder("oldpool").replicas(2).run_policy(backoffLimit=2, restartStrategy="InPlace") \
        .set("template.spec.nodeSelector", {"dpjob.io/test-node": old_kubelet_node}) \
        .tolerate("dpjob.io/test-node", old_kubelet_node)
    dpj.create(api, namespace, job.obj())
    st = dpj.wait_phase(api, namespace, "oldpool", "Running", timeout=90)
    assert st["restartStrategy"] == "Recreate" and st["restartsByReason"] == {"InPlaceUnavailable": 1}, st
    assert st["failureRestarts"] == 0, "the fallback is not charged to backoffLimit"
    warning = next(e for e in dpj.events(namespace, "oldpool") if e["reason"] == "InPlaceUnavailable")
    assert "RestartAllContainersOnContainerExits" in warning["message"], warning
    pods = wait_pods(core, namespace, "oldpool", 2)
    assert all(p.spec.node_name == old_kubelet_node for p in pods)
    assert not any(c.restart_policy_rules for p in pods for c in p.spec.containers), "the new gang has no rules"
