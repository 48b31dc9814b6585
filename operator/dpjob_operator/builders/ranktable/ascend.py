"""Ascend: the device plugin's annotation, HCCL ``hccl.json`` 1.0/1.2, and MindX's server ids.

Every rule here copies what HCCL, ascend-operator or MindX expect, so a table that torch_npu
reads through ``RANK_TABLE_FILE`` is indistinguishable from one the vendor's tools would write:
every value is a string, servers are in rank order, ``rank_id = podIndex * devicesPerPod + i``
where ``i`` walks the pod's devices sorted numerically by ``device_id`` (= the torch global
rank). Callers pass servers that the readiness check already accepted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dpjob_operator.builders.ranktable.model import (
    STATUS_COMPLETED,
    AscendAnnotationError,
    AscendDevice,
    AscendDevices,
    RankTableRequest,
    Server,
)

#: Node label whose SuperPoD values select HCCL 1.2 (ascend-operator factory.go rule).
ACCELERATOR_TYPE_LABEL = "accelerator-type"
SUPER_POD_ACCELERATOR_TYPES = frozenset({"module-a3-16-super-pod", "module-a3-8-super-pod"})
#: HCCL: server_id is at most 64 characters.
MAX_SERVER_ID = 64
#: What the Ascend device plugin writes when it could not read a device's NIC address.
INVALID_DEVICE_IP = "-1"


def select_hccl_version(req: RankTableRequest) -> str:
    """HCCL schema for ``req``: a forced version wins; auto picks 1.2 for SuperPoD pools.

    SuperPoD means ``super_pod_size`` (sp-block) is set, or the node selector's
    ``accelerator-type`` is an A3 SuperPoD module (ascend-operator factory.go). Otherwise 1.0.
    """
    if req.hccl_version in ("1.0", "1.2"):
        return req.hccl_version
    if req.super_pod_size is not None:
        return "1.2"
    if req.node_selector.get(ACCELERATOR_TYPE_LABEL) in SUPER_POD_ACCELERATOR_TYPES:
        return "1.2"
    return "1.0"


def logical_super_pod_id(pod_index: int, super_pod_size: int | None, devices_per_pod: int) -> int:
    """Logical SuperPoD of a rank pod: ``pod_index // (sp-block // devices per pod)``.

    Same rule as ascend-operator ``GetLogicSuperPodId``; also the value of
    ``HCCL_LOGIC_SUPERPOD_ID``. Without a size every pod is in SuperPoD 0.
    """
    if not super_pod_size or super_pod_size <= 0 or devices_per_pod <= 0:
        return 0
    pods_per_super_pod = max(1, super_pod_size // devices_per_pod)
    return pod_index // pods_per_super_pod


def _optional_str(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise AscendAnnotationError(f"{what} must be a string, got {value!r}")
    return str(value)


def _parse_device(raw: Any, where: str) -> tuple[int, AscendDevice]:
    if not isinstance(raw, dict):
        raise AscendAnnotationError(f"{where} must be an object, got {raw!r}")
    device_id = raw.get("device_id")
    if isinstance(device_id, bool) or not isinstance(device_id, (str, int)):
        raise AscendAnnotationError(f"{where}.device_id is missing or not a string")
    text_id = str(device_id).strip()
    if not (text_id.isascii() and text_id.isdigit()):
        raise AscendAnnotationError(
            f"{where}.device_id must be a non-negative integer, got {device_id!r}"
        )
    number = int(text_id)
    return number, AscendDevice(
        device_id=str(number),
        device_ip=_optional_str(raw.get("device_ip"), f"{where}.device_ip"),
        super_device_id=_optional_str(raw.get("super_device_id"), f"{where}.super_device_id"),
    )


def _parse_devices(raw_devices: Sequence[Any]) -> tuple[AscendDevice, ...]:
    """Devices sorted numerically; a repeated ``device_id`` is an error, never a merge."""
    devices: dict[int, AscendDevice] = {}
    for position, raw in enumerate(raw_devices):
        number, device = _parse_device(raw, f"devices[{position}]")
        if number in devices:
            raise AscendAnnotationError(f"device_id {number} appears more than once")
        devices[number] = device
    return tuple(devices[number] for number in sorted(devices))


def parse_ascend_device_annotation(text: str) -> AscendDevices:
    """Parse the device plugin's ``ascend-910-configuration`` JSON.

    Checks shape only (``device_ip`` ``"-1"`` is accepted here; the builders decide whether a
    format can use it). ``device_id`` must be a non-negative integer (string or number) and
    unique; ids are normalised to decimal strings and devices sorted numerically.
    """
    try:
        data = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise AscendAnnotationError(f"annotation is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AscendAnnotationError(
            f"annotation must be a JSON object, got {type(data).__name__}"
        )
    raw_devices = data.get("devices")
    if not isinstance(raw_devices, list):
        raise AscendAnnotationError("annotation has no \"devices\" list")
    devices = _parse_devices(raw_devices)
    return AscendDevices(
        pod_name=_optional_str(data.get("pod_name"), "pod_name"),
        server_id=_optional_str(data.get("server_id"), "server_id"),
        host_ip=_optional_str(data.get("host_ip"), "host_ip"),
        server_ip=_optional_str(data.get("server_ip"), "server_ip"),
        super_pod_id=_optional_str(data.get("super_pod_id"), "super_pod_id"),
        rack_id=_optional_str(data.get("rack_id"), "rack_id"),
        server_index=_optional_str(data.get("server_index"), "server_index"),
        devices=devices,
    )


def host_ip(server: Server) -> str | None:
    """The node's address: the device plugin's ``host_ip``, else the pod's ``status.hostIP``."""
    if server.devices is not None and server.devices.host_ip:
        return server.devices.host_ip
    return server.pod.host_ip or None


def server_id(req: RankTableRequest, server: Server) -> str | None:
    """HCCL ``server_id`` of a rank pod under ``req.server_id_mode`` (None: not known yet)."""
    mode = req.server_id_mode
    if mode == "pod-uid":
        return server.pod.uid or None
    if mode == "pod-ip":
        return server.pod.pod_ip or None
    if mode == "host-ip":  # MindX onePodOneNode
        return host_ip(server)
    if server.devices is not None and server.devices.server_id:
        return server.devices.server_id
    return server.pod.uid or None


def _hccl_devices(server: Server, version: str, per_pod: int) -> list[dict[str, str]]:
    assert server.devices is not None  # the readiness check guarantees it on npu
    device_list = []
    for local, device in enumerate(server.devices.devices):
        entry = {"device_id": device.device_id}
        if version == "1.2":
            entry["super_device_id"] = str(device.super_device_id)
        entry["device_ip"] = str(device.device_ip)
        entry["rank_id"] = str(server.pod.index * per_pod + local)
        device_list.append(entry)
    return device_list


def _hccl_server(req: RankTableRequest, server: Server, version: str) -> dict[str, Any]:
    """One ``server_list`` entry, keys in ascend-operator's order; ``host_ip`` only when known."""
    item: dict[str, Any] = {"server_id": server_id(req, server)}
    address = host_ip(server)
    if address:
        item["host_ip"] = address
    item["container_ip"] = str(server.pod.pod_ip)
    item["device"] = _hccl_devices(server, version, req.procs_per_replica)
    return item


def hccl_table(req: RankTableRequest, servers: Sequence[Server], version: str) -> dict[str, Any]:
    """The completed ``hccl.json`` of ``servers`` (already checked ready) in schema ``version``.

    1.2 adds ``super_device_id`` per device and ``super_pod_list`` with logical SuperPoD ids.
    """
    server_list = [_hccl_server(req, server, version) for server in servers]
    table: dict[str, Any] = {
        "version": version,
        "status": STATUS_COMPLETED,
        "server_count": str(len(server_list)),
        "server_list": server_list,
    }
    if version == "1.2":
        super_pods: dict[int, list[dict[str, str]]] = {}
        for server, item in zip(servers, server_list, strict=True):
            index = logical_super_pod_id(server.pod.index, req.super_pod_size, req.procs_per_replica)
            super_pods.setdefault(index, []).append({"server_id": item["server_id"]})
        table["super_pod_list"] = [
            {"super_pod_id": str(super_pod_id), "server_list": members}
            for super_pod_id, members in sorted(super_pods.items())
        ]
    return table
