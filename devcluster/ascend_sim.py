"""Simulated Ascend device plugin: the decisions, with the Kubernetes API injected.

The real Ascend device plugin (MindCluster ascend-device-plugin) runs on every NPU node, allocates
chips to containers through the kubelet and then annotates each NPU pod with the chips it got and
their network addresses. Our local cluster has kwok nodes and no kubelet device manager, so
``ascend_device_plugin.py`` stands in for it: it watches pods and writes the same annotations.

This module and ``ascend_annotations.py`` hold everything but the API calls, so they are
unit-tested without a cluster:

* the device-IP / super-device-id scheme (deterministic, unique per node and device) and
  ``build_pod_annotations``, the annotation values in the real plugin's JSON shape: in
  ``ascend_annotations.py``, re-exported here;
* ``DeviceAllocator``: lowest free chip ids per node, rebuilt from annotated pods;
* ``Annotator``: what to do with one observed pod (record, release, allocate + patch).

Pods and nodes are plain dicts in Kubernetes JSON shape (camelCase), as the API returns them.
Only the standard library is imported.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# ascend_device_plugin.py runs as a script and imports this module as ``ascend_sim``, from
# devcluster/ itself: the repository root makes this module's own imports resolve either way.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devcluster.ascend_annotations import (
    CONFIG_ANNOTATION_910,
    CONFIG_ANNOTATION_NPU,
    DEFAULT_RESOURCE,
    SUPER_DEVICE_STRIDE,
    SUPER_POD_ID_LABEL,
    TEST_DEVICE_IP_ANNOTATION,
    TEST_SUPER_DEVICE_ID_ANNOTATION,
    annotated_device_ids,
    build_pod_annotations,
    chip_prefix,
    config_annotation_key,
    device_ip,
    is_terminated,
    metadata,
    node_capacity,
    node_internal_ip,
    node_ordinal,
    pod_key,
    requested_devices,
    super_device_id,
)

# What ascend_device_plugin.py and the tests read from here.
__all__ = ["CONFIG_ANNOTATION_910", "CONFIG_ANNOTATION_NPU", "DEFAULT_RESOURCE", "SUPER_DEVICE_STRIDE",
           "SUPER_POD_ID_LABEL", "TEST_DEVICE_IP_ANNOTATION", "TEST_SUPER_DEVICE_ID_ANNOTATION", "Annotator",
           "DeviceAllocator", "annotated_device_ids", "build_pod_annotations", "chip_prefix", "config_annotation_key",
           "device_ip", "is_terminated", "node_capacity", "node_internal_ip", "node_ordinal", "pod_key",
           "requested_devices", "super_device_id"]


class DeviceAllocator:
    """Which chip ids each pod holds, per node; hands out the lowest free ids."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, tuple[int, ...]]] = {}
        self._node_of: dict[str, str] = {}

    def record(self, node: str, uid: str, device_ids: Iterable[int]) -> None:
        self.release(uid)
        ids = tuple(sorted(device_ids))
        self._by_node.setdefault(node, {})[uid] = ids
        self._node_of[uid] = node

    def release(self, uid: str) -> tuple[int, ...]:
        node = self._node_of.pop(uid, None)
        if node is None:
            return ()
        return self._by_node.get(node, {}).pop(uid, ())

    def holds(self, uid: str) -> bool:
        return uid in self._node_of

    def node_of(self, uid: str) -> str | None:
        return self._node_of.get(uid)

    def used(self, node: str) -> set[int]:
        return {i for ids in self._by_node.get(node, {}).values() for i in ids}

    def free(self, node: str, capacity: int) -> list[int]:
        used = self.used(node)
        return [i for i in range(capacity) if i not in used]

    def allocate(self, node: str, uid: str, count: int, capacity: int) -> tuple[int, ...] | None:
        """The ``count`` lowest free ids on ``node`` (recorded), or None if too few are free."""
        free = self.free(node, capacity)
        if count < 1 or len(free) < count:
            return None
        ids = tuple(free[:count])
        self.record(node, uid, ids)
        return ids


class Annotator:
    """Turns observed pods into annotations; the API calls are injected.

    ``read_node(name) -> dict | None`` and ``patch_annotations(namespace, name, annotations) ->
    bool`` (False when the patch failed, e.g. the pod is gone). ``observe`` returns what it did,
    for logs and tests: "annotated", "recorded", "released", "skipped" or None (nothing to do).
    """

    def __init__(
        self,
        read_node: Callable[[str], Mapping[str, Any] | None],
        patch_annotations: Callable[[str, str, dict[str, str]], bool],
        resource: str = DEFAULT_RESOURCE,
        log: Callable[[str], None] = print,
    ) -> None:
        self.read_node = read_node
        self.patch_annotations = patch_annotations
        self.resource = resource
        self.log = log
        self.allocator = DeviceAllocator()
        self._warned: set[str] = set()
        # Pods skipped because their node had too few free chips, by uid: retried when chips on
        # that node are released (the pod may see no further event of its own).
        self._waiting: dict[str, Mapping[str, Any]] = {}

    def sync(self, pods: Iterable[Mapping[str, Any]]) -> list[str | None]:
        """Rebuild from a full list: record every annotated pod first, then annotate the rest."""
        self.allocator = DeviceAllocator()
        self._warned.clear()
        self._waiting.clear()
        pods = list(pods)
        for pod in pods:
            self._record_if_annotated(pod)
        return [self.observe("ADDED", pod) for pod in pods]

    def _record_if_annotated(self, pod: Mapping[str, Any]) -> bool:
        node = (pod.get("spec") or {}).get("nodeName")
        uid = metadata(pod).get("uid")
        if not node or not uid or is_terminated(pod):
            return False
        ids = annotated_device_ids(pod, self.resource)
        if ids is None:
            return False
        self.allocator.record(node, uid, ids)
        return True

    def _warn_once(self, uid: str, message: str) -> str:
        if uid not in self._warned:
            self._warned.add(uid)
            self.log(message)
        return "skipped"

    def observe(self, event_type: str, pod: Mapping[str, Any]) -> str | None:
        uid = metadata(pod).get("uid")
        if not uid:
            return None
        if event_type == "DELETED" or is_terminated(pod):
            self._warned.discard(uid)
            self._waiting.pop(uid, None)
            node_name = self.allocator.node_of(uid)
            if not self.allocator.release(uid):
                return None
            self._retry_waiting(node_name)
            return "released"
        if self._record_if_annotated(pod):
            return "recorded"
        count = requested_devices(pod, self.resource)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if count == 0 or not node_name:
            return None
        if self.allocator.holds(uid):
            return None  # we patched it already; this event predates the patch
        key = pod_key(pod)
        node = self.read_node(node_name)
        if node is None:
            return self._warn_once(uid, f"skip {key}: node {node_name} not found")
        capacity = node_capacity(node, self.resource)
        if capacity == 0:
            return self._warn_once(
                uid, f"skip {key}: node {node_name} has no allocatable {self.resource}"
            )
        ids = self.allocator.allocate(node_name, uid, count, capacity)
        if ids is None:
            self._waiting[uid] = pod
            free = len(self.allocator.free(node_name, capacity))
            return self._warn_once(
                uid, f"skip {key}: wants {count} {self.resource}, node {node_name} has {free} free"
            )
        annotations = build_pod_annotations(pod, node, ids, self.resource)
        meta = metadata(pod)
        if not self.patch_annotations(meta.get("namespace", ""), meta.get("name", ""), annotations):
            self.allocator.release(uid)
            return "skipped"
        self._warned.discard(uid)
        self._waiting.pop(uid, None)
        instance = json.loads(annotations[config_annotation_key(self.resource)])
        ips = ",".join(d["device_ip"] for d in instance["devices"])
        self.log(
            f"annotated {key} node={node_name} devices={annotations[self.resource]} "
            f"device_ips={ips} host_ip={instance['host_ip']}"
        )
        return "annotated"

    def _retry_waiting(self, node_name: str | None) -> None:
        waiting = [
            pod
            for pod in self._waiting.values()
            if (pod.get("spec") or {}).get("nodeName") == node_name
        ]
        for pod in sorted(waiting, key=pod_key):
            self._waiting.pop(metadata(pod).get("uid", ""), None)
            self.observe("MODIFIED", pod)
