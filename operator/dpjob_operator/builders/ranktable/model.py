"""The rank-table vocabulary: file names, status values, errors and the value types.

Every other module of the package speaks in these types, so they live apart from any policy.
The file keys and the device annotation name are the API layer's constants (``api.constants``):
the pod builder mounts the same keys and the env builder points ``RANK_TABLE_FILE`` at them, so
they are re-exported here under the names this package has always used, not written again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from dpjob_operator.api import constants as c

GENERIC_API_VERSION = "dpjob.io/ranktable/v1"
GENERIC_FILE = c.RANKTABLE_KEY_GENERIC
HCCL_FILE = c.RANKTABLE_KEY_HCCL

#: Written by the Ascend device plugin on every pod that was allocated ``huawei.com/Ascend910``.
ASCEND_DEVICE_ANNOTATION = c.ASCEND_ANNOTATION

#: ``status`` of a table a consumer may use; the trainer polls for exactly this value.
STATUS_COMPLETED = "completed"
STATUS_INITIALIZING = "initializing"
#: Exact bytes of a not-yet-usable file (what HCCL, MindX scripts and our trainer poll for).
INITIALIZING = json.dumps({"status": STATUS_INITIALIZING})


class RankTableError(ValueError):
    """Base class of every error this package raises."""


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
    """One chip of the device annotation; ids are decimal strings, as HCCL writes them."""

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


@dataclass(frozen=True)
class Server:
    """The one pod chosen for a rank index, with its parsed devices (NPU only, else None).

    Internal to the package: the readiness check selects servers, the format builders read them.
    """

    pod: RankPod
    devices: AscendDevices | None
