"""Rank tables: observed rank pods -> the generic dpjob table and Ascend HCCL ``hccl.json``.

This package owns the *content* of every rank-table file the operator writes. It is pure: no
kopf, no Kubernetes client, no I/O. The operator gathers what it observed of the rank pods into
``RankPod`` values, describes the job in a ``RankTableRequest`` and calls ``build_rank_tables``,
which answers with the file bodies and a condition reason/message (``RankTableResult``).

Formats (see docs/ranktable.md for examples):

* generic ``dpjob.io/ranktable/v1`` (file ``ranktable.json``), for every accelerator;
* HCCL ``1.0`` and ``1.2`` (file ``hccl.json``), NPU only (``ascend``).

Modules, one concern each: ``model`` (names, errors, value types), ``request`` (validation and
which files), ``ascend`` (device annotation, HCCL and MindX rules), ``problems`` (readiness and
the condition's reason/message), ``size`` (the ConfigMap limit, compact writing), ``tables`` (the
generic table and the file set). Import from
the package: the module split is an implementation detail.
"""

from dpjob_operator.builders.ranktable.ascend import (
    ACCELERATOR_TYPE_LABEL,
    SUPER_POD_ACCELERATOR_TYPES,
    logical_super_pod_id,
    parse_ascend_device_annotation,
    select_hccl_version,
)
from dpjob_operator.builders.ranktable.model import (
    ASCEND_DEVICE_ANNOTATION,
    GENERIC_API_VERSION,
    GENERIC_FILE,
    HCCL_FILE,
    INITIALIZING,
    STATUS_COMPLETED,
    STATUS_INITIALIZING,
    AscendAnnotationError,
    AscendDevice,
    AscendDevices,
    RankPod,
    RankTableError,
    RankTableNotReadyError,
    RankTableRequest,
    RankTableRequestError,
    RankTableResult,
)
from dpjob_operator.builders.ranktable.problems import (
    REASON_COMPLETED,
    REASON_DEVICE_COUNT_MISMATCH,
    REASON_DISABLED,
    REASON_DUPLICATE_RANK_INDEX,
    REASON_DUPLICATE_SERVER_ID,
    REASON_INVALID_DEVICE_ANNOTATION,
    REASON_TOO_LARGE,
    REASON_WAITING_FOR_DEVICE_ANNOTATION,
    REASON_WAITING_FOR_POD_IPS,
    REASON_WAITING_FOR_PODS,
)
from dpjob_operator.builders.ranktable.request import (
    ACCELERATORS,
    FORMATS,
    HCCL_VERSIONS,
    SERVER_ID_MODES,
    generic_enabled,
    hccl_enabled,
    output_files,
    validate_request,
)
from dpjob_operator.builders.ranktable.size import (
    COMPACT_ABOVE_BYTES,
    FILE_LIMIT_BYTES,
    max_servers,
)
from dpjob_operator.builders.ranktable.tables import (
    build_generic_rank_table,
    build_hccl_rank_table,
    build_rank_tables,
    dump_table,
)

__all__ = [
    "ACCELERATORS",
    "ACCELERATOR_TYPE_LABEL",
    "ASCEND_DEVICE_ANNOTATION",
    "COMPACT_ABOVE_BYTES",
    "FILE_LIMIT_BYTES",
    "FORMATS",
    "GENERIC_API_VERSION",
    "GENERIC_FILE",
    "HCCL_FILE",
    "HCCL_VERSIONS",
    "INITIALIZING",
    "REASON_COMPLETED",
    "REASON_DEVICE_COUNT_MISMATCH",
    "REASON_DISABLED",
    "REASON_DUPLICATE_RANK_INDEX",
    "REASON_DUPLICATE_SERVER_ID",
    "REASON_INVALID_DEVICE_ANNOTATION",
    "REASON_TOO_LARGE",
    "REASON_WAITING_FOR_DEVICE_ANNOTATION",
    "REASON_WAITING_FOR_PODS",
    "REASON_WAITING_FOR_POD_IPS",
    "SERVER_ID_MODES",
    "STATUS_COMPLETED",
    "STATUS_INITIALIZING",
    "SUPER_POD_ACCELERATOR_TYPES",
    "AscendAnnotationError",
    "AscendDevice",
    "AscendDevices",
    "RankPod",
    "RankTableError",
    "RankTableNotReadyError",
    "RankTableRequest",
    "RankTableRequestError",
    "RankTableResult",
    "build_generic_rank_table",
    "build_hccl_rank_table",
    "build_rank_tables",
    "dump_table",
    "generic_enabled",
    "hccl_enabled",
    "logical_super_pod_id",
    "max_servers",
    "output_files",
    "parse_ascend_device_annotation",
    "select_hccl_version",
    "validate_request",
]
