"""A node lost under a running gang, on the real control plane: the gang restarts elsewhere at once.

One extra kwok node in the cpu pool carries a label of its own, and the job's template selects it,
so both ranks run there. Deleting the Node object leaves the rank pods phase Running (no kubelet
will ever say otherwise; the pod GC controller would delete them only after its 40 s quarantine).
The operator's node watch sees the node go and restarts the gang: NodeLost=True naming the node, a
NodeLost Warning event, the node in status.avoidNodes, nothing charged to backoffLimit (0 here: a
charged restart would fail the job), and a new generation of pods. The new gang selects a node that
is gone, so it stays Pending; that is all this test needs.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from devcluster.kwok_pools import PoolSpec, node_manifest
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import JOB_LABEL, RESTART_LABEL
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)
JOB = "lost"
NODE_LABEL = "dpjob.io/node-loss-test"


def _ready(core: client.CoreV1Api, name: str) -> bool:
    conditions = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


@pytest.fixture()
def doomed_node(core) -> Iterator[str]:
    """A kwok node of the cpu pool that only this test's job selects; deleted in teardown if the test
    did not get that far."""
    suffix = uuid.uuid4().hex[:5]
    taint = {"key": NODE_LABEL, "value": suffix, "effect": "NoSchedule"}  # no other test's pods land there
    manifest = node_manifest(PoolSpec(f"loss-{suffix}", 1, {"dpjob.io/pool": "cpu", NODE_LABEL: suffix}, [taint], {}),
                             0)
    name = manifest["metadata"]["name"]
    core.create_node(manifest)
    try:
        wait_until(lambda: _ready(core, name), timeout=30, interval=0.5, what=f"kwok reports node {name} Ready")
        yield name
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_node(name)


def _gang(core: client.CoreV1Api, namespace: str, restart: int) -> list[Any] | None:
    """Both rank pods of gang ``restart`` (not being deleted), once both exist."""
    pods = [p for p in dpj.rank_pods(core, namespace, JOB)
            if p.metadata.labels[RESTART_LABEL] == str(restart) and not p.metadata.deletion_timestamp]
    return pods if len(pods) == 2 else None


def _node_lost(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "NodeLost" and c["status"] == "True"),
                None)


def test_a_node_deleted_under_a_running_gang_restarts_it_elsewhere_uncharged(api, core, namespace, operator,
                                                                             doomed_node):
    node = doomed_node
    label = core.read_node(node).metadata.labels[NODE_LABEL]
    job = JobBuilder(JOB).replicas(2).node_selector({NODE_LABEL: label}).tolerate(NODE_LABEL, label) \
        .run_policy(backoffLimit=0)
    dpj.create(api, namespace, job.obj())
    try:
        dpj.wait_phase(api, namespace, JOB, "Running", timeout=40)
        old = wait_until(lambda: _gang(core, namespace, 0), timeout=10, what="both rank pods of restart 0")
        assert all(p.spec.node_name == node and p.status.phase == "Running" for p in old)

        core.delete_node(node)

        st = dpj.wait_status(api, namespace, JOB, lambda s: s.get("restarts") == 1 and _node_lost(s) is not None,
                             timeout=20, what="the gang restarted with NodeLost=True")
        cond = _node_lost(st)
        assert cond is not None and cond["reason"] == "NodeLost"
        assert f"node {node}" in cond["message"] and "rank(s) 0, 1" in cond["message"], cond["message"]
        assert st["phase"] != "Failed", st.get("message")  # backoffLimit 0: a charged restart would fail it
        assert st["failureRestarts"] == 0 and st["restartsByReason"] == {"NodeLost": 1}
        assert st["avoidNodes"]["restart"] == 1 and node in st["avoidNodes"]["nodes"]
        events = dpj.wait_event(namespace, JOB, "NodeLost", timeout=10)
        assert any(e["type"] == "Warning" and node in e["message"] for e in events), events

        # A new generation, and the old pods gone at once: force-deleted, as no kubelet would confirm.
        new = wait_until(lambda: _gang(core, namespace, 1), timeout=20, what="both rank pods of restart 1")
        old_uids = {p.metadata.uid for p in old}
        assert {p.metadata.uid for p in new}.isdisjoint(old_uids)
        wait_until(lambda: not [p for p in dpj.rank_pods(core, namespace, JOB) if p.metadata.uid in old_uids],
                   timeout=10, what="the pods of restart 0 gone")
        st = dpj.status(api, namespace, JOB)
        assert st["restarts"] == 1 and st["failureRestarts"] == 0 and st["phase"] == "Restarting"
    finally:
        with contextlib.suppress(client.ApiException):
            dpj.delete(api, namespace, JOB)
        for p in core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={JOB}").items:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(p.metadata.name, namespace, grace_period_seconds=0)
