"""Rank tables: observed rank pods -> the generic dpjob table and Ascend HCCL ``hccl.json``.

This module owns the *content* of every rank-table file the operator writes. It is pure: no kopf,
no Kubernetes client, no I/O. The operator gathers what it observed of the rank pods into
``RankPod`` values, describes the job in a ``RankTableRequest`` and calls ``build_rank_tables``,
which answers with the file bodies and a condition reason/message (``RankTableResult``).

Formats (see docs/ranktable.md for examples):

* generic ``dpjob.io/ranktable/v1`` (file ``ranktable.json``), for every accelerator;
* HCCL ``1.0`` and ``1.2`` (file ``hccl.json``), NPU only. Every value is a string, ranks are
  contiguous per server, ``rank_id = podIndex * devicesPerPod + i`` where ``i`` walks the pod's
  devices sorted numerically by ``device_id``; this equals the torch global rank, which is what
  torch_npu's ``RANK_TABLE_FILE`` path requires.

Output is deterministic: pods are sorted by rank index, devices by numeric device id, JSON keys are
inserted in a fixed order and serialised with ``json.dumps(obj, indent=2)``. The same observed
pods in any order give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GENERIC_API_VERSION = "dpjob.io/ranktable/v1"
GENERIC_FILE = "ranktable.json"
HCCL_FILE = "hccl.json"

#: Written by the Ascend device plugin on every pod that was allocated ``huawei.com/Ascend910``.
ASCEND_DEVICE_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
#: Node label whose SuperPoD values select HCCL 1.2 (ascend-operator factory.go rule).
ACCELERATOR_TYPE_LABEL = "accelerator-type"
SUPER_POD_ACCELERATOR_TYPES = frozenset({"module-a3-16-super-pod", "module-a3-8-super-pod"})

#: Exact bytes of a not-yet-usable file (what HCCL, MindX scripts and our trainer poll for).
INITIALIZING = json.dumps({"status": "initializing"})

ACCELERATORS = ("gpu", "cpu", "npu")
FORMATS = ("auto", "generic", "hccl", "none")
HCCL_VERSIONS = ("auto", "1.0", "1.2")
SERVER_ID_MODES = ("annotation", "pod-uid", "pod-ip", "host-ip")

# HCCL: server_id is at most 64 characters.
_MAX_SERVER_ID = 64
# What the Ascend device plugin writes when it could not read a device's NIC address.
_INVALID_DEVICE_IP = "-1"
# How many pod names one sentence of a condition message lists before "and N more".
_MAX_NAMES = 5

# Condition reasons (CamelCase), in the order a message reports them: permanent problems that a
# user must fix come before the transient ones that resolve by waiting.
REASON_COMPLETED = "Completed"
REASON_DISABLED = "Disabled"
REASON_DUPLICATE_RANK_INDEX = "DuplicateRankIndex"
REASON_INVALID_DEVICE_ANNOTATION = "InvalidDeviceAnnotation"
REASON_DEVICE_COUNT_MISMATCH = "DeviceCountMismatch"
REASON_DUPLICATE_SERVER_ID = "DuplicateServerID"
REASON_WAITING_FOR_PODS = "WaitingForPods"
REASON_WAITING_FOR_POD_IPS = "WaitingForPodIPs"
REASON_WAITING_FOR_DEVICE_ANNOTATION = "WaitingForDeviceAnnotation"
_REASON_PRIORITY = (
    REASON_DUPLICATE_RANK_INDEX,
    REASON_INVALID_DEVICE_ANNOTATION,
    REASON_DEVICE_COUNT_MISMATCH,
    REASON_DUPLICATE_SERVER_ID,
    REASON_WAITING_FOR_PODS,
    REASON_WAITING_FOR_POD_IPS,
    REASON_WAITING_FOR_DEVICE_ANNOTATION,
)


class RankTableError(ValueError):
    """Base class of every error this module raises."""


class RankTableRequestError(RankTableError):
    """The request itself is invalid (a spec the API layer should have rejected)."""


class AscendAnnotationError(RankTableError):
    """The Ascend device annotation is not the JSON shape the device plugin writes."""


class RankTableNotReadyError(RankTableError):
    """A low-level builder was called with pods that cannot produce a completed table yet."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class RankPod:
    """What the operator observed of one rank pod."""

    index: int  # rank index 0..replicas-1 (label dpjob.io/rank)
    name: str
    uid: str
    node: str | None
    pod_ip: str | None
    host_ip: str | None
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RankTableRequest:
    """The job-level inputs of a rank table."""

    job_name: str
    namespace: str
    restart: int  # gang generation the table belongs to
    accelerator: str  # "gpu" | "cpu" | "npu"
    replicas: int
    procs_per_replica: int
    format: str  # "auto" | "generic" | "hccl" | "none"
    hccl_version: str = "auto"  # "auto" | "1.0" | "1.2"
    super_pod_size: int | None = None  # ascend sp-block, in chips
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Where HCCL server_id comes from: "annotation" (ascend-operator: the device plugin's server_id,
    # which is the pod UID; falls back to the pod UID), "pod-uid", "pod-ip", or "host-ip" (MindX
    # onePodOneNode; only unique with one rank pod per node).
    server_id_mode: str = "annotation"

    @property
    def world_size(self) -> int:
        return self.replicas * self.procs_per_replica


@dataclass(frozen=True)
class RankTableResult:
    """File bodies plus what the RankTableReady condition should say."""

    ready: bool
    reason: str
    message: str
    version: str  # "1.0" | "1.2" when hccl.json is written, else "generic"; "none" when disabled
    files: dict[str, str]  # file name -> JSON text


@dataclass(frozen=True)
class AscendDevice:
    device_id: str
    device_ip: str | None
    super_device_id: str | None


@dataclass(frozen=True)
class AscendDevices:
    """The parsed ``ascend-910-configuration`` annotation; ``devices`` sorted by numeric id."""

    pod_name: str | None
    server_id: str | None
    host_ip: str | None
    server_ip: str | None
    super_pod_id: str | None
    rack_id: str | None
    server_index: str | None
    devices: tuple[AscendDevice, ...]


# --------------------------------------------------------------------------------------------
# Request validation and format selection


def validate_request(req: RankTableRequest) -> None:
    """Raise ``RankTableRequestError`` naming the field to change when ``req`` is unusable."""
    if not req.job_name:
        raise RankTableRequestError("job name must not be empty")
    if req.accelerator not in ACCELERATORS:
        raise RankTableRequestError(
            f"spec.accelerator must be one of {', '.join(ACCELERATORS)}, got {req.accelerator!r}"
        )
    if req.format not in FORMATS:
        raise RankTableRequestError(
            f"spec.rankTable.format must be one of {', '.join(FORMATS)}, got {req.format!r}"
        )
    if req.format == "hccl" and req.accelerator != "npu":
        raise RankTableRequestError(
            f"spec.rankTable.format hccl needs accelerator npu, got {req.accelerator!r}; "
            "use format auto or generic"
        )
    if req.hccl_version not in HCCL_VERSIONS:
        raise RankTableRequestError(
            f"spec.rankTable.hcclVersion must be one of {', '.join(HCCL_VERSIONS)}, "
            f"got {req.hccl_version!r}"
        )
    if req.replicas < 1:
        raise RankTableRequestError(f"spec.replicas must be >= 1, got {req.replicas}")
    if req.procs_per_replica < 1:
        raise RankTableRequestError(
            f"spec.procsPerReplica must be >= 1, got {req.procs_per_replica}"
        )
    if req.restart < 0:
        raise RankTableRequestError(f"restart must be >= 0, got {req.restart}")
    if req.server_id_mode not in SERVER_ID_MODES:
        raise RankTableRequestError(
            f"server id mode must be one of {', '.join(SERVER_ID_MODES)}, "
            f"got {req.server_id_mode!r}"
        )
    if req.super_pod_size is not None and req.accelerator == "npu":
        size, per_pod = req.super_pod_size, req.procs_per_replica
        if size < per_pod or size % per_pod:
            raise RankTableRequestError(
                f"spec.rankTable.superPodSize must be a positive multiple of procsPerReplica "
                f"({per_pod} chips per rank pod), got {size}"
            )


def hccl_enabled(req: RankTableRequest) -> bool:
    return req.accelerator == "npu" and req.format in ("auto", "hccl")


def generic_enabled(req: RankTableRequest) -> bool:
    return req.format in ("auto", "generic")


def output_files(req: RankTableRequest) -> tuple[str, ...]:
    """The file names ``build_rank_tables`` produces for ``req``, in a fixed order."""
    names = []
    if generic_enabled(req):
        names.append(GENERIC_FILE)
    if hccl_enabled(req):
        names.append(HCCL_FILE)
    return tuple(names)


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


# --------------------------------------------------------------------------------------------
# Ascend device annotation


def _optional_str(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise AscendAnnotationError(f"{what} must be a string, got {value!r}")
    return str(value)


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
    devices: dict[int, AscendDevice] = {}
    for position, raw in enumerate(raw_devices):
        where = f"devices[{position}]"
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
        if number in devices:
            raise AscendAnnotationError(f"device_id {number} appears more than once")
        devices[number] = AscendDevice(
            device_id=str(number),
            device_ip=_optional_str(raw.get("device_ip"), f"{where}.device_ip"),
            super_device_id=_optional_str(raw.get("super_device_id"), f"{where}.super_device_id"),
        )
    return AscendDevices(
        pod_name=_optional_str(data.get("pod_name"), "pod_name"),
        server_id=_optional_str(data.get("server_id"), "server_id"),
        host_ip=_optional_str(data.get("host_ip"), "host_ip"),
        server_ip=_optional_str(data.get("server_ip"), "server_ip"),
        super_pod_id=_optional_str(data.get("super_pod_id"), "super_pod_id"),
        rack_id=_optional_str(data.get("rack_id"), "rack_id"),
        server_index=_optional_str(data.get("server_index"), "server_index"),
        devices=tuple(devices[number] for number in sorted(devices)),
    )


# --------------------------------------------------------------------------------------------
# Inspection: which pods make up the table, and what stops it from being complete


@dataclass(frozen=True)
class _Server:
    pod: RankPod
    devices: AscendDevices | None  # NPU only


@dataclass(frozen=True)
class _Problem:
    reason: str
    subject: str  # a pod name, or "index N" for a missing pod
    detail: str = ""


def _host_ip(server: _Server) -> str | None:
    if server.devices is not None and server.devices.host_ip:
        return server.devices.host_ip
    return server.pod.host_ip or None


def _server_id(req: RankTableRequest, server: _Server) -> str | None:
    mode = req.server_id_mode
    if mode == "pod-uid":
        return server.pod.uid or None
    if mode == "pod-ip":
        return server.pod.pod_ip or None
    if mode == "host-ip":
        return _host_ip(server)
    if server.devices is not None and server.devices.server_id:
        return server.devices.server_id
    return server.pod.uid or None


def _inspect(
    req: RankTableRequest, pods: Sequence[RankPod], hccl_version: str | None
) -> tuple[list[_Server], list[_Problem]]:
    """Select one pod per rank index and list every problem; ``hccl_version`` None = no hccl."""
    by_index: dict[int, list[RankPod]] = {}
    for pod in pods:
        if 0 <= pod.index < req.replicas:  # extra pods (scale-down leftovers) are ignored
            by_index.setdefault(pod.index, []).append(pod)

    problems: list[_Problem] = []
    servers: list[_Server] = []
    for index in range(req.replicas):
        candidates = sorted(by_index.get(index, []), key=lambda p: (p.name, p.uid))
        if not candidates:
            problems.append(_Problem(REASON_WAITING_FOR_PODS, f"index {index}"))
            continue
        if len(candidates) > 1:
            names = ", ".join(p.name for p in candidates)
            problems.append(_Problem(REASON_DUPLICATE_RANK_INDEX, f"index {index}", names))
            continue
        pod = candidates[0]
        if not pod.pod_ip:
            problems.append(_Problem(REASON_WAITING_FOR_POD_IPS, pod.name))
        devices = None
        if req.accelerator == "npu":
            devices, device_problems = _inspect_devices(req, pod, hccl_version)
            problems.extend(device_problems)
        servers.append(_Server(pod, devices))

    if hccl_version is not None and not problems:
        problems.extend(_inspect_server_ids(req, servers))
    return servers, problems


def _inspect_devices(
    req: RankTableRequest, pod: RankPod, hccl_version: str | None
) -> tuple[AscendDevices | None, list[_Problem]]:
    text = pod.annotations.get(ASCEND_DEVICE_ANNOTATION)
    if text is None:
        return None, [_Problem(REASON_WAITING_FOR_DEVICE_ANNOTATION, pod.name)]
    try:
        devices = parse_ascend_device_annotation(text)
    except AscendAnnotationError as exc:
        return None, [_Problem(REASON_INVALID_DEVICE_ANNOTATION, pod.name, str(exc))]
    if len(devices.devices) != req.procs_per_replica:
        count = len(devices.devices)
        detail = f"has {count} Ascend devices, procsPerReplica is {req.procs_per_replica}"
        return devices, [_Problem(REASON_DEVICE_COUNT_MISMATCH, pod.name, detail)]
    problems = []
    if hccl_version is not None:
        for device in devices.devices:
            if not device.device_ip:
                detail = f"device {device.device_id} has no device_ip"
            elif device.device_ip == _INVALID_DEVICE_IP:
                detail = (
                    f"device {device.device_id} has device_ip \"-1\" (the device plugin could "
                    f"not read its NIC address; check hccn.conf on node {pod.node or '?'})"
                )
            elif hccl_version == "1.2" and not device.super_device_id:
                detail = f"device {device.device_id} has no super_device_id, which HCCL 1.2 needs"
            else:
                continue
            problems.append(_Problem(REASON_INVALID_DEVICE_ANNOTATION, pod.name, detail))
    return devices, problems


def _inspect_server_ids(req: RankTableRequest, servers: Sequence[_Server]) -> list[_Problem]:
    problems = []
    owners: dict[str, list[str]] = {}
    for server in servers:
        server_id = _server_id(req, server)
        if not server_id:
            problems.append(
                _Problem(
                    REASON_WAITING_FOR_POD_IPS,
                    server.pod.name,
                    f"no {req.server_id_mode.replace('-', ' ')} for server_id yet",
                )
            )
        elif len(server_id) > _MAX_SERVER_ID:
            detail = f"server_id {server_id[:20]}... is longer than {_MAX_SERVER_ID} characters"
            problems.append(_Problem(REASON_INVALID_DEVICE_ANNOTATION, server.pod.name, detail))
        else:
            owners.setdefault(server_id, []).append(server.pod.name)
    for server_id, names in sorted(owners.items()):
        if len(names) > 1:
            detail = f"{', '.join(names)} share server_id {server_id}"
            problems.append(_Problem(REASON_DUPLICATE_SERVER_ID, names[0], detail))
    return problems


def _names(subjects: Sequence[str]) -> str:
    shown = ", ".join(subjects[:_MAX_NAMES])
    more = len(subjects) - _MAX_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _details(problems: Sequence[_Problem]) -> str:
    shown = "; ".join(f"{p.subject}: {p.detail}" for p in problems[:_MAX_NAMES])
    more = len(problems) - _MAX_NAMES
    return f"{shown}; and {more} more" if more > 0 else shown


def _sentence(req: RankTableRequest, reason: str, problems: Sequence[_Problem]) -> str:
    subjects = [p.subject for p in problems]
    if reason == REASON_WAITING_FOR_PODS:
        present = req.replicas - len(problems)
        indexes = _names([s.removeprefix("index ") for s in subjects])
        return f"waiting for rank pods with index {indexes} ({present} of {req.replicas} observed)"
    if reason == REASON_WAITING_FOR_POD_IPS:
        if any(p.detail for p in problems):  # server_id_mode pod-ip/host-ip without an address
            return f"waiting for addresses: {_details(problems)}"
        return f"waiting for pod IPs of {_names(subjects)}"
    if reason == REASON_WAITING_FOR_DEVICE_ANNOTATION:
        return (
            f"waiting for the Ascend device plugin to annotate {_names(subjects)} with "
            f"{ASCEND_DEVICE_ANNOTATION}"
        )
    if reason == REASON_DUPLICATE_RANK_INDEX:
        return "more than one pod per rank: " + "; ".join(
            f"{p.subject} is claimed by {p.detail}" for p in problems
        )
    if reason == REASON_INVALID_DEVICE_ANNOTATION:
        return f"invalid {ASCEND_DEVICE_ANNOTATION}: {_details(problems)}"
    if reason == REASON_DEVICE_COUNT_MISMATCH:
        return (
            f"Ascend device count does not match: {_details(problems)}; every rank pod must "
            f"request {req.procs_per_replica} chips, one per process"
        )
    if reason == REASON_DUPLICATE_SERVER_ID:
        return "HCCL server_id must be unique: " + "; ".join(p.detail for p in problems)
    return _details(problems)  # pragma: no cover - every reason is handled above


def _summarise(req: RankTableRequest, problems: Sequence[_Problem]) -> tuple[str, str]:
    """(reason, message): the highest-priority reason; the message covers every problem."""
    grouped: dict[str, list[_Problem]] = {}
    for problem in problems:
        grouped.setdefault(problem.reason, []).append(problem)
    reasons = [reason for reason in _REASON_PRIORITY if reason in grouped]
    sentences = [_sentence(req, reason, grouped[reason]) for reason in reasons]
    message = f"rank table of {req.namespace}/{req.job_name} (restart {req.restart}): " + "; ".join(
        sentences
    )
    return reasons[0], message


def _ready_servers(
    req: RankTableRequest, pods: Sequence[RankPod], hccl_version: str | None
) -> list[_Server]:
    validate_request(req)
    servers, problems = _inspect(req, pods, hccl_version)
    if problems:
        reason, message = _summarise(req, problems)
        raise RankTableNotReadyError(reason, message)
    return servers


# --------------------------------------------------------------------------------------------
# Builders


def build_generic_rank_table(req: RankTableRequest, pods: Sequence[RankPod]) -> dict[str, Any]:
    """The ``dpjob.io/ranktable/v1`` table, keys in documented order.

    Raises ``RankTableNotReadyError`` when ``pods`` cannot make a completed table.
    ``deviceId`` is the Ascend device id on NPU and null on GPU/CPU (the API does not say which
    GPU a container got).
    """
    servers = _ready_servers(req, pods, hccl_version=None)
    per_pod = req.procs_per_replica
    server_list = []
    for server in servers:
        pod = server.pod
        device_ids: list[str | None] = [None] * per_pod
        if server.devices is not None:
            device_ids = [device.device_id for device in server.devices.devices]
        ranks = [
            {"rank": pod.index * per_pod + local, "localRank": local, "deviceId": device_ids[local]}
            for local in range(per_pod)
        ]
        server_list.append(
            {
                "podIndex": pod.index,
                "pod": pod.name,
                "uid": pod.uid,
                "node": pod.node,
                "podIP": pod.pod_ip,
                "hostIP": pod.host_ip,
                "ranks": ranks,
            }
        )
    return {
        "apiVersion": GENERIC_API_VERSION,
        "status": "completed",
        "job": req.job_name,
        "namespace": req.namespace,
        "restart": req.restart,
        "accelerator": req.accelerator,
        "worldSize": req.world_size,
        "replicas": req.replicas,
        "procsPerReplica": per_pod,
        "servers": server_list,
    }


def build_hccl_rank_table(
    req: RankTableRequest, pods: Sequence[RankPod], version: str | None = None
) -> dict[str, Any]:
    """HCCL ``hccl.json`` (``version`` "1.0" or "1.2"; default ``select_hccl_version(req)``).

    Every value is a string. Servers are in rank order (= pod index order), devices in numeric
    device-id order, ``rank_id = podIndex * devicesPerPod + i``. Each server carries
    ``server_id`` (see ``RankTableRequest.server_id_mode``), ``host_ip`` (annotation, else the
    pod's hostIP; omitted when unknown) and ``container_ip`` (pod IP), as ascend-operator does.
    1.2 adds ``super_device_id`` per device and ``super_pod_list`` with logical SuperPoD ids.
    """
    if req.accelerator != "npu":
        raise RankTableRequestError(
            f"HCCL rank tables need accelerator npu, got {req.accelerator!r}"
        )
    version = version or select_hccl_version(req)
    if version not in ("1.0", "1.2"):
        raise RankTableRequestError(f"HCCL version must be 1.0 or 1.2, got {version!r}")
    servers = _ready_servers(req, pods, hccl_version=version)
    per_pod = req.procs_per_replica
    server_list = []
    super_pods: dict[int, list[dict[str, str]]] = {}
    for server in servers:
        assert server.devices is not None  # _ready_servers guarantees it on npu
        pod = server.pod
        server_id = _server_id(req, server)
        assert server_id is not None
        device_list = []
        for local, device in enumerate(server.devices.devices):
            entry = {"device_id": device.device_id}
            if version == "1.2":
                entry["super_device_id"] = str(device.super_device_id)
            entry["device_ip"] = str(device.device_ip)
            entry["rank_id"] = str(pod.index * per_pod + local)
            device_list.append(entry)
        item: dict[str, Any] = {"server_id": server_id}
        host_ip = _host_ip(server)
        if host_ip:
            item["host_ip"] = host_ip
        item["container_ip"] = str(pod.pod_ip)
        item["device"] = device_list
        server_list.append(item)
        super_pod_id = logical_super_pod_id(pod.index, req.super_pod_size, per_pod)
        super_pods.setdefault(super_pod_id, []).append({"server_id": server_id})

    table: dict[str, Any] = {
        "version": version,
        "status": "completed",
        "server_count": str(len(server_list)),
        "server_list": server_list,
    }
    if version == "1.2":
        table["super_pod_list"] = [
            {"super_pod_id": str(super_pod_id), "server_list": members}
            for super_pod_id, members in sorted(super_pods.items())
        ]
    return table


def dump_table(table: Mapping[str, Any]) -> str:
    """Serialise a table: key order as built, two-space indent, no trailing newline."""
    return json.dumps(table, indent=2, sort_keys=False)


def build_rank_tables(req: RankTableRequest, pods: Sequence[RankPod]) -> RankTableResult:
    """Every rank-table file of ``req`` plus the RankTableReady reason and message.

    Completed only when each of the ``replicas`` rank indexes has exactly one pod with a pod IP
    and, on NPU, a valid device annotation with ``procs_per_replica`` devices. Until then every
    file is ``{"status": "initializing"}``. Pods with an index outside 0..replicas-1 are ignored;
    two pods with the same index are reported (DuplicateRankIndex), never guessed between.
    Raises ``RankTableRequestError`` for an invalid request (see ``validate_request``).
    """
    validate_request(req)
    if req.format == "none":
        return RankTableResult(
            ready=False,
            reason=REASON_DISABLED,
            message="rank tables are disabled (spec.rankTable.format: none)",
            version="none",
            files={},
        )
    hccl_version = select_hccl_version(req) if hccl_enabled(req) else None
    version = hccl_version or "generic"
    names = output_files(req)

    _, problems = _inspect(req, pods, hccl_version)
    if problems:
        reason, message = _summarise(req, problems)
        return RankTableResult(
            ready=False,
            reason=reason,
            message=message,
            version=version,
            files={name: INITIALIZING for name in names},
        )

    files: dict[str, str] = {}
    if GENERIC_FILE in names:
        files[GENERIC_FILE] = dump_table(build_generic_rank_table(req, pods))
    if HCCL_FILE in names:
        files[HCCL_FILE] = dump_table(build_hccl_rank_table(req, pods, hccl_version))
    world = req.world_size
    return RankTableResult(
        ready=True,
        reason=REASON_COMPLETED,
        message=(
            f"rank table of {req.namespace}/{req.job_name} (restart {req.restart}) completed: "
            f"{req.replicas} rank pods, world size {world}, files {', '.join(names)}"
            + (f" (HCCL {hccl_version})" if hccl_version else "")
        ),
        version=version,
        files=files,
    )
