"""Which rank tables a job asks for, and whether the request is usable at all.

The API layer validates the spec; this check repeats the rules the builders rely on so that a
bad request fails with the field to change, never with a half-built table.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpjob_operator.builders.ranktable.model import (
    GENERIC_FILE,
    HCCL_FILE,
    RankTableRequest,
    RankTableRequestError,
)

ACCELERATORS = ("gpu", "cpu", "npu")
FORMATS = ("auto", "generic", "hccl", "none")
HCCL_VERSIONS = ("auto", "1.0", "1.2")
SERVER_ID_MODES = ("annotation", "pod-uid", "pod-ip", "host-ip")


def _require_one_of(what: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise RankTableRequestError(f"{what} must be one of {', '.join(choices)}, got {value!r}")


def _validate_formats(req: RankTableRequest) -> None:
    _require_one_of("spec.accelerator", req.accelerator, ACCELERATORS)
    _require_one_of("spec.rankTable.format", req.format, FORMATS)
    if req.format == "hccl" and req.accelerator != "npu":
        raise RankTableRequestError(
            f"spec.rankTable.format hccl needs accelerator npu, got {req.accelerator!r}; "
            "use format auto or generic"
        )
    _require_one_of("spec.rankTable.hcclVersion", req.hccl_version, HCCL_VERSIONS)


def _validate_sizes(req: RankTableRequest) -> None:
    if req.replicas < 1:
        raise RankTableRequestError(f"spec.replicas must be >= 1, got {req.replicas}")
    if req.procs_per_replica < 1:
        raise RankTableRequestError(
            f"spec.procsPerReplica must be >= 1, got {req.procs_per_replica}"
        )
    if req.restart < 0:
        raise RankTableRequestError(f"restart must be >= 0, got {req.restart}")


def _validate_servers(req: RankTableRequest) -> None:
    _require_one_of("server id mode", req.server_id_mode, SERVER_ID_MODES)
    if req.super_pod_size is not None and req.accelerator == "npu":
        size, per_pod = req.super_pod_size, req.procs_per_replica
        if size < per_pod or size % per_pod:
            raise RankTableRequestError(
                f"spec.rankTable.superPodSize must be a positive multiple of procsPerReplica "
                f"({per_pod} chips per rank pod), got {size}"
            )


def validate_request(req: RankTableRequest) -> None:
    """Raise ``RankTableRequestError`` naming the field to change when ``req`` is unusable."""
    if not req.job_name:
        raise RankTableRequestError("job name must not be empty")
    _validate_formats(req)
    _validate_sizes(req)
    _validate_servers(req)


def hccl_enabled(req: RankTableRequest) -> bool:
    """Whether ``hccl.json`` is written: NPU jobs in format auto or hccl."""
    return req.accelerator == "npu" and req.format in ("auto", "hccl")


def generic_enabled(req: RankTableRequest) -> bool:
    """Whether ``ranktable.json`` is written: every accelerator in format auto or generic."""
    return req.format in ("auto", "generic")


def output_files(req: RankTableRequest) -> tuple[str, ...]:
    """The file names ``build_rank_tables`` produces for ``req``, in a fixed order."""
    names = []
    if generic_enabled(req):
        names.append(GENERIC_FILE)
    if hccl_enabled(req):
        names.append(HCCL_FILE)
    return tuple(names)
