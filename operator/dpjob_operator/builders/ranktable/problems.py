"""Readiness: which pod serves each rank, what keeps the table from completing, and how to say it.

A rank table is all or nothing: HCCL reads it once, so a table with a missing or wrong server
builds a broken communicator. Instead of guessing, every problem is collected and reported in a
RankTableReady condition whose reason is the most urgent one and whose message names every pod
involved (permanent problems a user must fix first, then the ones that resolve by waiting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpjob_operator.builders.ranktable.ascend import (
    INVALID_DEVICE_IP,
    MAX_SERVER_ID,
    parse_ascend_device_annotation,
    server_id,
)
from dpjob_operator.builders.ranktable.model import (
    ASCEND_DEVICE_ANNOTATION,
    AscendAnnotationError,
    AscendDevice,
    AscendDevices,
    RankPod,
    RankTableNotReadyError,
    RankTableRequest,
    Server,
)
from dpjob_operator.builders.ranktable.request import validate_request

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
REASON_TOO_LARGE = "RankTableTooLarge"  # completed, but a file is over the ConfigMap limit (see size.py)
_REASON_PRIORITY = (
    REASON_DUPLICATE_RANK_INDEX,
    REASON_INVALID_DEVICE_ANNOTATION,
    REASON_DEVICE_COUNT_MISMATCH,
    REASON_DUPLICATE_SERVER_ID,
    REASON_WAITING_FOR_PODS,
    REASON_WAITING_FOR_POD_IPS,
    REASON_WAITING_FOR_DEVICE_ANNOTATION,
)
# How many pod names one sentence of a condition message lists before "and N more".
_MAX_NAMES = 5


@dataclass(frozen=True)
class Problem:
    """One thing that keeps the table from completing."""

    reason: str
    subject: str  # a pod name, or "index N" for a missing pod
    detail: str = ""


def inspect(
    req: RankTableRequest, pods: Sequence[RankPod], hccl_version: str | None
) -> tuple[list[Server], list[Problem]]:
    """Select one pod per rank index and list every problem; ``hccl_version`` None = no hccl."""
    by_index: dict[int, list[RankPod]] = {}
    for pod in pods:
        if 0 <= pod.index < req.replicas:  # extra pods (scale-down leftovers) are ignored
            by_index.setdefault(pod.index, []).append(pod)

    problems: list[Problem] = []
    servers: list[Server] = []
    for index in range(req.replicas):
        candidates = sorted(by_index.get(index, []), key=lambda p: (p.name, p.uid))
        if not candidates:
            problems.append(Problem(REASON_WAITING_FOR_PODS, f"index {index}"))
            continue
        if len(candidates) > 1:
            names = ", ".join(p.name for p in candidates)
            problems.append(Problem(REASON_DUPLICATE_RANK_INDEX, f"index {index}", names))
            continue
        pod = candidates[0]
        if not pod.pod_ip:
            problems.append(Problem(REASON_WAITING_FOR_POD_IPS, pod.name))
        devices = None
        if req.accelerator == "npu":
            devices, device_problems = _inspect_devices(req, pod, hccl_version)
            problems.extend(device_problems)
        servers.append(Server(pod, devices))

    if hccl_version is not None and not problems:
        problems.extend(_inspect_server_ids(req, servers))
    return servers, problems


def _device_detail(pod: RankPod, device: AscendDevice, hccl_version: str) -> str | None:
    """Why HCCL cannot use this device, or None when it can."""
    if not device.device_ip:
        return f"device {device.device_id} has no device_ip"
    if device.device_ip == INVALID_DEVICE_IP:
        return (
            f"device {device.device_id} has device_ip \"-1\" (the device plugin could "
            f"not read its NIC address; check hccn.conf on node {pod.node or '?'})"
        )
    if hccl_version == "1.2" and not device.super_device_id:
        return f"device {device.device_id} has no super_device_id, which HCCL 1.2 needs"
    return None


def _inspect_devices(
    req: RankTableRequest, pod: RankPod, hccl_version: str | None
) -> tuple[AscendDevices | None, list[Problem]]:
    text = pod.annotations.get(ASCEND_DEVICE_ANNOTATION)
    if text is None:
        return None, [Problem(REASON_WAITING_FOR_DEVICE_ANNOTATION, pod.name)]
    try:
        devices = parse_ascend_device_annotation(text)
    except AscendAnnotationError as exc:
        return None, [Problem(REASON_INVALID_DEVICE_ANNOTATION, pod.name, str(exc))]
    if len(devices.devices) != req.procs_per_replica:
        count = len(devices.devices)
        detail = f"has {count} Ascend devices, procsPerReplica is {req.procs_per_replica}"
        return devices, [Problem(REASON_DEVICE_COUNT_MISMATCH, pod.name, detail)]
    problems = []
    if hccl_version is not None:
        for device in devices.devices:
            found = _device_detail(pod, device, hccl_version)
            if found is not None:
                problems.append(Problem(REASON_INVALID_DEVICE_ANNOTATION, pod.name, found))
    return devices, problems


def _inspect_server_ids(req: RankTableRequest, servers: Sequence[Server]) -> list[Problem]:
    problems = []
    owners: dict[str, list[str]] = {}
    for server in servers:
        found = server_id(req, server)
        if not found:
            problems.append(
                Problem(
                    REASON_WAITING_FOR_POD_IPS,
                    server.pod.name,
                    f"no {req.server_id_mode.replace('-', ' ')} for server_id yet",
                )
            )
        elif len(found) > MAX_SERVER_ID:
            detail = f"server_id {found[:20]}... is longer than {MAX_SERVER_ID} characters"
            problems.append(Problem(REASON_INVALID_DEVICE_ANNOTATION, server.pod.name, detail))
        else:
            owners.setdefault(found, []).append(server.pod.name)
    for shared_id, names in sorted(owners.items()):
        if len(names) > 1:
            detail = f"{', '.join(names)} share server_id {shared_id}"
            problems.append(Problem(REASON_DUPLICATE_SERVER_ID, names[0], detail))
    return problems


def _names(subjects: Sequence[str]) -> str:
    shown = ", ".join(subjects[:_MAX_NAMES])
    more = len(subjects) - _MAX_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _details(problems: Sequence[Problem]) -> str:
    shown = "; ".join(f"{p.subject}: {p.detail}" for p in problems[:_MAX_NAMES])
    more = len(problems) - _MAX_NAMES
    return f"{shown}; and {more} more" if more > 0 else shown


def _sentence(req: RankTableRequest, reason: str, problems: Sequence[Problem]) -> str:
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


def summarise(req: RankTableRequest, problems: Sequence[Problem]) -> tuple[str, str]:
    """(reason, message): the highest-priority reason; the message covers every problem."""
    grouped: dict[str, list[Problem]] = {}
    for problem in problems:
        grouped.setdefault(problem.reason, []).append(problem)
    reasons = [reason for reason in _REASON_PRIORITY if reason in grouped]
    sentences = [_sentence(req, reason, grouped[reason]) for reason in reasons]
    message = f"rank table of {req.namespace}/{req.job_name} (restart {req.restart}): " + "; ".join(
        sentences
    )
    return reasons[0], message


def ready_servers(
    req: RankTableRequest, pods: Sequence[RankPod], hccl_version: str | None
) -> list[Server]:
    """The servers of a completed table; ``RankTableNotReadyError`` says why there is none yet."""
    validate_request(req)
    servers, problems = inspect(req, pods, hccl_version)
    if problems:
        reason, message = summarise(req, problems)
        raise RankTableNotReadyError(reason, message)
    return servers
