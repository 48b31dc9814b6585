"""The annotations the real Ascend device plugin (MindCluster ascend-device-plugin) writes on an
NPU pod, and what the simulation reads from pods and nodes to write them: the device-IP /
super-device-id scheme (deterministic, unique per node and device), the chips a pod requests and
a node offers, and the chips a pod's annotations say it holds.

Pure functions over plain dicts in Kubernetes JSON shape (camelCase), as the API returns them;
devcluster/ascend_sim.py decides when to write them. Only the standard library is imported.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_RESOURCE = "huawei.com/Ascend910"
CONFIG_ANNOTATION_910 = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
CONFIG_ANNOTATION_NPU = "ascend.kubectl.kubernetes.io/ascend-npu-configuration"

#: Test-only switch on a pod: ``"-1"`` makes every device_ip "-1" (the real plugin's value when it
#: cannot read a chip's NIC address), to exercise the operator's InvalidDeviceAnnotation path.
TEST_DEVICE_IP_ANNOTATION = "dpjob.test/ascend-device-ip"
#: Test-only switch on a pod: ``"omit"`` leaves super_device_id out (HCCL 1.2 cannot use that).
TEST_SUPER_DEVICE_ID_ANNOTATION = "dpjob.test/ascend-super-device-id"
#: Optional node label: the SuperPoD id the plugin reports for chips on that node (default 0).
SUPER_POD_ID_LABEL = "dpjob.test/super-pod-id"

# Node ordinals come from a trailing number in the node name ("kwok-npu-3" -> 3). Names without
# one (or with a huge one) get a stable hash in [_HASH_BASE, _HASH_BASE + _HASH_SPAN), far away
# from the ordinals real test clusters use.
_MAX_ORDINAL = 9999
_HASH_BASE = 10000
_HASH_SPAN = 50000
# super_device_id = node ordinal * stride + device id + 1: unique cluster-wide for < 100 chips/node.
SUPER_DEVICE_STRIDE = 100

_TRAILING_NUMBER = re.compile(r"(\d+)$")


def config_annotation_key(resource: str) -> str:
    """``huawei.com/npu`` (A5) pods get the npu key; every other resource the 910 key."""
    return CONFIG_ANNOTATION_NPU if resource.endswith("/npu") else CONFIG_ANNOTATION_910


def chip_prefix(resource: str) -> str:
    """``huawei.com/Ascend910`` -> ``Ascend910`` (as in ``Ascend910-0,Ascend910-1``)."""
    return resource.rsplit("/", 1)[-1]


def node_ordinal(node_name: str) -> int:
    """Deterministic small integer per node: its trailing number, else a stable hash."""
    match = _TRAILING_NUMBER.search(node_name)
    if match and int(match.group(1)) <= _MAX_ORDINAL:
        return int(match.group(1))
    return _HASH_BASE + zlib.crc32(node_name.encode()) % _HASH_SPAN


def device_ip(ordinal: int, device_id: int) -> str:
    """``10.<20+device>.<n // 256>.<n % 256>`` with n = ordinal + 1: node 3, chip 5 -> 10.25.0.4.

    Unique per (node, chip) for ordinals below 65535 and chips below 236, and it reads like the
    per-chip subnets of a real ``/etc/hccn.conf`` (one subnet per chip index across nodes).
    """
    number = ordinal + 1
    return f"10.{20 + device_id}.{number // 256}.{number % 256}"


def super_device_id(ordinal: int, device_id: int) -> str:
    """``ordinal * 100 + device_id + 1``: node 3, chip 5 -> "306"."""
    return str(ordinal * SUPER_DEVICE_STRIDE + device_id + 1)


def _quantity(value: Any) -> int:
    """Extended resources are whole numbers; anything unreadable counts as 0."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def requested_devices(pod: Mapping[str, Any], resource: str = DEFAULT_RESOURCE) -> int:
    """Chips the pod needs: sum over containers, at least the largest init container.

    A container's limit wins over its request (for extended resources they must be equal, and a
    limit alone implies the request).
    """

    def of(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            amount = (resources.get(kind) or {}).get(resource)
            if amount is not None:
                return _quantity(amount)
        return 0

    spec = pod.get("spec") or {}
    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def node_capacity(node: Mapping[str, Any], resource: str = DEFAULT_RESOURCE) -> int:
    status = node.get("status") or {}
    return _quantity((status.get("allocatable") or {}).get(resource, 0))


def node_internal_ip(node: Mapping[str, Any]) -> str | None:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return None


def is_terminated(pod: Mapping[str, Any]) -> bool:
    """Succeeded/Failed pods hold no chips any more (a deleting pod still does)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = metadata(pod)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def annotated_device_ids(
    pod: Mapping[str, Any], resource: str = DEFAULT_RESOURCE
) -> tuple[int, ...] | None:
    """Chip ids a pod already holds according to its annotations, None when it has none.

    Reads the configuration JSON first, then the ``huawei.com/Ascend910: Ascend910-0,...`` list.
    """
    annotations = metadata(pod).get("annotations") or {}
    text = annotations.get(config_annotation_key(resource))
    if text is not None:
        try:
            devices = json.loads(text).get("devices") or []
            return tuple(sorted(int(d["device_id"]) for d in devices))
        except (ValueError, TypeError, KeyError, AttributeError):
            pass
    listed = annotations.get(resource)
    if listed is not None:
        ids = []
        for item in str(listed).split(","):
            tail = item.strip().rsplit("-", 1)[-1]
            if tail.isdigit():
                ids.append(int(tail))
        return tuple(sorted(ids))
    return None


def build_pod_annotations(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    device_ids: Iterable[int],
    resource: str = DEFAULT_RESOURCE,
) -> dict[str, str]:
    """The annotations the real plugin writes, for chips ``device_ids`` of ``node``.

    ``{config key: JSON, resource: "Ascend910-0,Ascend910-1"}``. The JSON has the real plugin's
    ``Instance`` shape and key order: pod_name, server_id (pod UID), host_ip and server_ip (node
    InternalIP, else the pod's hostIP), super_pod_id and rack_id (ints), server_index (string),
    devices [{device_id, device_ip, super_device_id}] (strings). Compact, like Go's json.Marshal.
    """
    meta = metadata(pod)
    annotations = meta.get("annotations") or {}
    node_meta = node.get("metadata") or {}
    node_name = str(node_meta.get("name", ""))
    ordinal = node_ordinal(node_name)
    host_ip = node_internal_ip(node) or (pod.get("status") or {}).get("hostIP") or ""
    forced_ip = annotations.get(TEST_DEVICE_IP_ANNOTATION) == "-1"
    omit_sdid = annotations.get(TEST_SUPER_DEVICE_ID_ANNOTATION) == "omit"
    ids = sorted(device_ids)

    devices = []
    for device in ids:
        entry = {
            "device_id": str(device),
            "device_ip": "-1" if forced_ip else device_ip(ordinal, device),
        }
        if not omit_sdid:
            entry["super_device_id"] = super_device_id(ordinal, device)
        devices.append(entry)
    labels = node_meta.get("labels") or {}
    instance = {
        "pod_name": meta.get("name", ""),
        "server_id": meta.get("uid", ""),
        "host_ip": host_ip,
        "server_ip": host_ip,
        "super_pod_id": _quantity(labels.get(SUPER_POD_ID_LABEL, 0)),
        "rack_id": 0,
        "server_index": str(ordinal),
        "devices": devices,
    }
    prefix = chip_prefix(resource)
    return {
        config_annotation_key(resource): json.dumps(instance, separators=(",", ":")),
        resource: ",".join(f"{prefix}-{device}" for device in ids),
    }
