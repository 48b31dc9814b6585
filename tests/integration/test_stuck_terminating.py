"""A rank stuck Terminating on a node that is down, on the real control plane.

The node is a Node object that no kubelet (and no kwok) serves: it never reports Ready, so a pod
bound to it can be deleted but never goes, exactly like a pod on a powered-off or partitioned
node. The job's pods are bound to it through the template's nodeName (they stay Pending: nobody
runs them). A deleted rank stays Terminating and holds the name its replacement needs. The
operator must say so (StuckTerminating, naming the node) and force-delete it, so the rank is
created again.
The test operator counts a pod as stuck 5 s after its deletion deadline (the default is 120 s).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import wait_pods
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture()
def dead_node(core) -> Iterator[str]:
    name = f"stuck-{uuid.uuid4().hex[:5]}"
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                      "status": {"capacity": capacity, "allocatable": capacity}})
    yield name
    core.delete_node(name)


def test_a_rank_stuck_on_a_down_node_is_reported_and_force_deleted_so_the_gang_restarts(
        api, core, namespace, operator, dead_node):
    job = JobBuilder("stuck").replicas(2).set("template.spec.nodeName", dead_node) \
        .set("template.spec.terminationGracePeriodSeconds", 1)
    dpj.create(api, namespace, job.obj())
    first = {p.metadata.name: p.metadata.uid for p in wait_pods(core, namespace, "stuck", 2, phase="Pending")}
    core.delete_namespaced_pod("stuck-rank-1", namespace)  # graceful: nobody will ever confirm it

    def stuck_event() -> dict | None:
        return next((e for e in dpj.events(namespace, "stuck") if e["reason"] == "StuckTerminating"), None)

    event = wait_until(stuck_event, timeout=60, interval=1, what="a StuckTerminating Warning event")
    assert event["type"] == "Warning" and f"node {dead_node} (NotReady)" in event["message"]
    assert "force-deleting" in event["message"]

    def replaced() -> object | None:
        pods = {p.metadata.name: p for p in dpj.rank_pods(core, namespace, "stuck")}
        p = pods.get("stuck-rank-1")
        return p if p is not None and p.metadata.uid != first["stuck-rank-1"] and not p.metadata.deletion_timestamp \
            else None

    wait_until(replaced, timeout=60, interval=1, what="rank 1 created again under the freed name")
    st = dpj.wait_status(api, namespace, "stuck",
                         lambda s: any(c["type"] == "StuckTerminating" and c["status"] == "False"
                                       for c in s.get("conditions") or []), timeout=30, what="StuckTerminating cleared")
    assert st["restarts"] == 0  # the gang never ran: the rank is replaced, nothing restarts
    dpj.delete(api, namespace, "stuck")
