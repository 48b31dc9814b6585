"""A rank stuck Terminating on a node that is down, on the real control plane.

The node is a Node object that no kubelet (and no kwok) serves: it never reports Ready, so a pod
bound to it can be deleted but never goes, exactly like a pod on a powered-off or partitioned
node. The job's pods are bound to it through the template's nodeName (they stay Pending: nobody
runs them). A deleted rank stays Terminating and holds the name its replacement needs. The
operator must say so (StuckTerminating, naming the node) and force-delete it, so the rank is
created again.
The test operator counts a pod as stuck 5 s after its deletion deadline (the default is 120 s).

Two stories: a job whose ranks never ran (the deleted rank is replaced under its freed name), and
a running gang (the test plays the kubelet's one part it needs and reports the ranks Running), where
deleting a rank restarts the gang and the new generation can only be created once the operator has
force-deleted the old pods.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch

from devcluster.kwok_pools import DECLARED_FEATURES
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import GROUP, JOB_LABEL, PLURAL, RESTART_LABEL, VERSION, wait_pods
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)
JOB = "train"


@pytest.fixture()
def dead_node(core) -> Iterator[str]:
    name = f"stuck-{uuid.uuid4().hex[:5]}"
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                      "status": {"capacity": capacity, "allocatable": capacity,
                                 "declaredFeatures": list(DECLARED_FEATURES)}})
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


def _create_dead_node(core: client.CoreV1Api, name: str) -> None:
    """A Node no kubelet and no kwok manage: it never reports Ready. Tainted, so nothing else is
    scheduled onto it; our ranks name it in spec.nodeName and bypass the scheduler."""
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    core.create_node(client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"dpjob.io/test": "stuck-terminating"}),
        spec=client.V1NodeSpec(taints=[client.V1Taint(key="dpjob.io/stuck-test", value="true",
                                                      effect="NoSchedule")]),
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity)))


class ConditionLog:
    """Every StuckTerminating condition the job's status carried, from a watch (a poll could miss a
    True that lasts one pass: the force-deleted pod is gone at once, and the next pass clears it)."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self._watch = watch.Watch()
        start = dpj.get(api, namespace, JOB)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(api, namespace, start), daemon=True)
        self._thread.start()

    def _run(self, api: Any, namespace: str, resource_version: str) -> None:
        jobs = client.CustomObjectsApi(api)
        # stop() closes the stream under the reader: the end of the watch, not an error.
        with contextlib.suppress(urllib3.exceptions.HTTPError):
            for event in self._watch.stream(jobs.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                                            field_selector=f"metadata.name={JOB}",
                                            resource_version=resource_version, timeout_seconds=120):
                conds = (event["object"].get("status") or {}).get("conditions") or []
                self.seen.extend(c for c in conds if c.get("type") == "StuckTerminating")

    def first(self, status: str, reason: str) -> dict[str, Any] | None:
        return next((c for c in list(self.seen) if (c["status"], c["reason"]) == (status, reason)), None)

    def stop(self) -> None:
        self._watch.stop()


def _report_running(core: client.CoreV1Api, namespace: str, pods: list[Any]) -> None:
    """The kubelet's part: the ranks run (nothing runs them; the status says so)."""
    for p in pods:
        core.patch_namespaced_pod_status(p.metadata.name, namespace, {"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})


def _force_delete_leftovers(core: client.CoreV1Api, namespace: str) -> None:
    """Nobody finishes a pod on the dead node: force-delete what the job left, so the namespace goes."""
    for p in core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={JOB}").items:
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod(p.metadata.name, namespace, grace_period_seconds=0)


def _gang(core: client.CoreV1Api, namespace: str, restart: int) -> list[Any] | None:
    """Both rank pods of gang ``restart``, once both exist."""
    pods = [p for p in dpj.rank_pods(core, namespace, JOB) if p.metadata.labels[RESTART_LABEL] == str(restart)]
    return pods if len(pods) == 2 else None


def test_a_rank_stuck_terminating_on_a_node_that_is_down_is_force_deleted_and_the_gang_restarts(
        api, core, namespace, operator):
    node = f"stuck-{uuid.uuid5(uuid.NAMESPACE_URL, namespace)}"
    _create_dead_node(core, node)
    log: ConditionLog | None = None
    try:
        job = (JobBuilder(JOB).replicas(2).set("template.spec.nodeName", node)
               .set("template.spec.terminationGracePeriodSeconds", 1).run_policy(gangScheduling="Disabled"))
        dpj.create(api, namespace, job.obj())
        old = wait_until(lambda: _gang(core, namespace, 0), timeout=60, what="both rank pods of restart 0")
        assert all(p.spec.node_name == node and p.status.phase == "Pending" for p in old)
        _report_running(core, namespace, old)
        dpj.wait_phase(api, namespace, JOB, "Running", timeout=60)
        log = ConditionLog(api, namespace)

        # A graceful delete: deletionTimestamp = now + 1 s, after which only a kubelet could finish it.
        core.delete_namespaced_pod(f"{JOB}-rank-1", namespace)
        assert core.read_namespaced_pod(f"{JOB}-rank-1", namespace).metadata.deletion_timestamp is not None

        cond = wait_until(lambda: log.first("True", "NodeNotReady"), timeout=60,
                          what="StuckTerminating=True/NodeNotReady")
        assert node in cond["message"] and "force-deleting" in cond["message"], cond["message"]
        naming = wait_until(lambda: [e for e in dpj.wait_event(namespace, JOB, "StuckTerminating")
                                     if node in e["message"]], what=f"a StuckTerminating event naming {node}")
        assert all(e["type"] == "Warning" for e in naming + dpj.wait_event(namespace, JOB, "StuckTerminating"))

        # The gang restart the stuck pods blocked goes on: new pods under the same names.
        new = wait_until(lambda: _gang(core, namespace, 1), timeout=60, what="both rank pods of restart 1")
        old_uids = {p.metadata.uid for p in old}
        assert {p.metadata.uid for p in new}.isdisjoint(old_uids)
        assert not [p for p in dpj.rank_pods(core, namespace, JOB) if p.metadata.uid in old_uids]
        st = dpj.status(api, namespace, JOB)
        assert st["restarts"] == 1 and st["restartsByReason"] == {"PodDeleted": 1}
        wait_until(lambda: log.first("False", "Cleared"), timeout=30, what="StuckTerminating=False/Cleared")
    finally:
        if log is not None:
            log.stop()
        with contextlib.suppress(client.ApiException):
            dpj.delete(api, namespace, JOB)
        _force_delete_leftovers(core, namespace)
        core.delete_node(node)
