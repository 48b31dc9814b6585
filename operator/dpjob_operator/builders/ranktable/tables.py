"""Rank tables of a job: the generic ``dpjob.io/ranktable/v1`` table and the file set.

``build_rank_tables`` is what the operator calls: it decides which files the request asks for,
asks the readiness check whether the observed pods make a complete gang, and answers with
either the completed tables or ``{"status": "initializing"}`` in every file, plus the
RankTableReady reason and message. Output is deterministic: keys are inserted in a fixed order
and serialised by ``dump_table``, so the same pods in any order give byte-identical files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpjob_operator.builders.ranktable.ascend import hccl_table, select_hccl_version
from dpjob_operator.builders.ranktable.model import (
    GENERIC_API_VERSION,
    GENERIC_FILE,
    HCCL_FILE,
    INITIALIZING,
    STATUS_COMPLETED,
    RankPod,
    RankTableRequest,
    RankTableRequestError,
    RankTableResult,
    Server,
)
from dpjob_operator.builders.ranktable.problems import (
    REASON_COMPLETED,
    REASON_DISABLED,
    REASON_TOO_LARGE,
    inspect,
    ready_servers,
    summarise,
)
from dpjob_operator.builders.ranktable.request import (
    hccl_enabled,
    output_files,
    validate_request,
)
from dpjob_operator.builders.ranktable.size import oversized, serialise, too_large_message


def _generic_server(server: Server, per_pod: int) -> dict[str, Any]:
    pod = server.pod
    device_ids: list[str | None] = [None] * per_pod
    if server.devices is not None:
        device_ids = [device.device_id for device in server.devices.devices]
    ranks = [
        {"rank": pod.index * per_pod + local, "localRank": local, "deviceId": device_ids[local]}
        for local in range(per_pod)
    ]
    return {
        "podIndex": pod.index,
        "pod": pod.name,
        "uid": pod.uid,
        "node": pod.node,
        "podIP": pod.pod_ip,
        "hostIP": pod.host_ip,
        "ranks": ranks,
    }


def build_generic_rank_table(req: RankTableRequest, pods: Sequence[RankPod]) -> dict[str, Any]:
    """The ``dpjob.io/ranktable/v1`` table, keys in documented order.

    Raises ``RankTableNotReadyError`` when ``pods`` cannot make a completed table.
    ``deviceId`` is the Ascend device id on NPU and null on GPU/CPU (the API does not say which
    GPU a container got).
    """
    servers = ready_servers(req, pods, hccl_version=None)
    return {
        "apiVersion": GENERIC_API_VERSION,
        "status": STATUS_COMPLETED,
        "job": req.job_name,
        "namespace": req.namespace,
        "restart": req.restart,
        "accelerator": req.accelerator,
        "worldSize": req.world_size,
        "replicas": req.replicas,
        "procsPerReplica": req.procs_per_replica,
        "servers": [_generic_server(server, req.procs_per_replica) for server in servers],
    }


def build_hccl_rank_table(
    req: RankTableRequest, pods: Sequence[RankPod], version: str | None = None
) -> dict[str, Any]:
    """HCCL ``hccl.json`` (``version`` "1.0" or "1.2"; default ``select_hccl_version(req)``).

    Every value is a string. Servers are in rank order (= pod index order), devices in numeric
    device-id order, ``rank_id = podIndex * devicesPerPod + i``. Each server carries
    ``server_id`` (see ``RankTableRequest.server_id_mode``), ``host_ip`` (annotation, else the
    pod's hostIP; omitted when unknown) and ``container_ip`` (pod IP), as ascend-operator does.
    Raises ``RankTableNotReadyError`` when ``pods`` cannot make a completed table.
    """
    if req.accelerator != "npu":
        raise RankTableRequestError(
            f"HCCL rank tables need accelerator npu, got {req.accelerator!r}"
        )
    version = version or select_hccl_version(req)
    if version not in ("1.0", "1.2"):
        raise RankTableRequestError(f"HCCL version must be 1.0 or 1.2, got {version!r}")
    return hccl_table(req, ready_servers(req, pods, hccl_version=version), version)


def dump_table(table: Mapping[str, Any]) -> str:
    """Serialise a table: key order as built, two-space indent (compact when large: see ``size``)."""
    return serialise(table)


def _completed_message(req: RankTableRequest, names: Sequence[str], hccl_version: str | None) -> str:
    return (
        f"rank table of {req.namespace}/{req.job_name} (restart {req.restart}) completed: "
        f"{req.replicas} rank pods, world size {req.world_size}, files {', '.join(names)}"
        + (f" (HCCL {hccl_version})" if hccl_version else "")
    )


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
    _, problems = inspect(req, pods, hccl_version)
    if problems:
        reason, message = summarise(req, problems)
        files = dict.fromkeys(names, INITIALIZING)
        return RankTableResult(False, reason, message, version, files)
    files = {}
    if GENERIC_FILE in names:
        files[GENERIC_FILE] = dump_table(build_generic_rank_table(req, pods))
    if HCCL_FILE in names:
        files[HCCL_FILE] = dump_table(build_hccl_rank_table(req, pods, hccl_version))
    too_big = oversized(files)
    if too_big:
        # Never publish a table the API server would refuse: the trainer keeps waiting on
        # "initializing" and the condition says why, with the numbers.
        return RankTableResult(False, REASON_TOO_LARGE, too_large_message(too_big), version,
                               dict.fromkeys(names, INITIALIZING))
    message = _completed_message(req, names, hccl_version)
    return RankTableResult(True, REASON_COMPLETED, message, version, files)
