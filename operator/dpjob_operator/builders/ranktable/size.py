"""How big a rank-table file may be, and how it is written so that large gangs still fit.

Every file is published in a ConfigMap of its own, and the API server refuses a ConfigMap whose keys
and values add up to more than 1 MiB (``ValidateConfigMap`` in
``k8s.io/kubernetes/pkg/apis/core/validation`` checks them against ``core.MaxSecretSize``). An
indented table passes that at about 1,000 pods x 8 processes, so a file is written compact (no
indentation, no spaces) once its indented form would be over ``COMPACT_ABOVE_BYTES``: small tables
stay readable with ``kubectl get cm -o yaml``, large ones roughly halve. A file still over
``FILE_LIMIT_BYTES`` is not written at all: the trainer keeps seeing ``initializing`` and the job is
told ``RankTableTooLarge`` with the numbers, instead of every write failing while status says the
table is ready.

The CRD bounds a table's size with a linear model, ``servers x (PER_SERVER + PER_RANK x per_pod) <=
MODEL_LIMIT_BYTES`` (servers = replicas, or maxReplicas when elastic; per_pod = procsPerReplica,
devicesPerReplica on npu), once for the generic table and once for HCCL on npu. The coefficients are
measured, compact, with the longest names the API allows (job 53, namespace, pod and node 63
characters), UUIDs and 15-character IPv4 addresses, and rounded up; a unit test builds every format
at the model's largest gang and checks it fits, and another checks the CRD states these same
numbers. So a job the API server accepts is one the operator can publish, unless its nodes have
longer names or its pods IPv6 addresses: then the run-time check above says ``RankTableTooLarge``.
At 8 processes per pod that is 1,630 pods (13,040 ranks) on gpu/cpu and 1,155 pods (9,240 devices)
on npu.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: The API server's limit on a ConfigMap's data (keys plus values).
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
#: Room kept for the key itself and for the MindX map's ``version`` key next to ``hccl.json``.
KEY_RESERVE_BYTES = 64
FILE_LIMIT_BYTES = CONFIGMAP_LIMIT_BYTES - KEY_RESERVE_BYTES
#: Indented tables above this are written compact.
COMPACT_ABOVE_BYTES = 512 * 1024
#: The size model of the CRD's bound (bytes, compact, worst-case names): see the module docstring.
MODEL_LIMIT_BYTES = 1_040_000
GENERIC_PER_SERVER, GENERIC_PER_RANK = 270, 46
HCCL_PER_SERVER, HCCL_PER_RANK = 140, 95  # HCCL 1.2, the larger of the two versions


def max_servers(per_pod: int, hccl: bool) -> int:
    """The most rank pods the CRD's size rule admits at ``per_pod`` processes (devices) each."""
    limit = MODEL_LIMIT_BYTES // (GENERIC_PER_SERVER + GENERIC_PER_RANK * per_pod)
    if hccl:
        limit = min(limit, MODEL_LIMIT_BYTES // (HCCL_PER_SERVER + HCCL_PER_RANK * per_pod))
    return limit


def serialise(table: Mapping[str, Any]) -> str:
    """Key order as built, two-space indent, no trailing newline; compact when that is too big."""
    text = json.dumps(table, indent=2, sort_keys=False)
    if len(text.encode()) > COMPACT_ABOVE_BYTES:
        text = json.dumps(table, separators=(",", ":"), sort_keys=False)
    return text


def oversized(files: Mapping[str, str]) -> dict[str, int]:
    """The files (name -> bytes) that no ConfigMap can hold."""
    sizes = {name: len(body.encode()) for name, body in files.items()}
    return {name: size for name, size in sizes.items() if size > FILE_LIMIT_BYTES}


def too_large_message(sizes: Mapping[str, int]) -> str:
    listed = ", ".join(f"{name} {size:,} bytes" for name, size in sorted(sizes.items()))
    return (f"the rank table does not fit in a ConfigMap ({listed}; the limit is {FILE_LIMIT_BYTES:,} bytes "
            f"per file, even written compact): run fewer ranks per job, or set spec.rankTable.format: none "
            f"if the trainer does not read it")
