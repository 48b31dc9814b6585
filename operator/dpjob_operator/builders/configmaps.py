"""Rank-table ConfigMaps: observed pods -> ``<job>-ranktable`` (and MindX's ``rings-config-<job>``).

Bridges the operator's pod observations to the pure rank-table builder in ``builders.ranktable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpjob_operator.api.labels import generation_labels
from dpjob_operator.api.names import mindx_configmap_name, ranktable_configmap_names
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.ranktable import (
    HCCL_FILE,
    RankPod,
    RankTableRequest,
    RankTableResult,
    build_rank_tables,
    output_files,
)


def rank_table_request(job: Job, restart: int) -> RankTableRequest:
    spec = job.spec
    selector = ((spec.template.get("spec") or {}).get("nodeSelector") or {})
    return RankTableRequest(
        job_name=job.name, namespace=job.namespace, restart=restart, accelerator=spec.accelerator,
        replicas=spec.replicas,
        procs_per_replica=spec.devices_per_replica if spec.accelerator == "npu" else spec.procs_per_replica,
        format=spec.rank_table.format, hccl_version=spec.rank_table.hccl_version,
        super_pod_size=spec.rank_table.super_pod_size, node_selector=dict(selector),
    )


def build_job_rank_tables(job: Job, restart: int, pods: Sequence[PodObservation]) -> RankTableResult:
    """Rank tables of the current gang: only live pods of generation ``restart`` count."""
    rank_pods = [RankPod(index=p.index, name=p.name, uid=p.uid, node=p.node, pod_ip=p.pod_ip, host_ip=p.host_ip,
                         annotations=dict(p.annotations))
                 for p in pods if p.restart == restart and not p.deleting and p.phase in ("Pending", "Running")]
    return build_rank_tables(rank_table_request(job, restart), rank_pods)


def ranktable_layout(job: Job) -> dict[str, str]:
    """Rank-table file -> its ConfigMap. Fixed by the spec (accelerator and format, both immutable
    in effect), never by the table's size, because the pods' volumes name these maps at creation."""
    if job.spec.rank_table.format == "none":
        return {}
    return ranktable_configmap_names(job.name, output_files(rank_table_request(job, 0)))


def build_ranktable_configmaps(job: Job, files: Mapping[str, str], restart: int) -> list[dict[str, Any]]:
    """One ConfigMap per file of ``files`` (see ``ranktable_layout``); the MindX-compatible one
    carries hccl.json and a version key."""
    meta = {"namespace": job.namespace, "labels": generation_labels(job, restart),
            "ownerReferences": [job.owner_reference]}
    layout = ranktable_layout(job)
    maps = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": layout[file], **meta},
             "data": {file: body}}
            for file, body in files.items() if file in layout]
    if job.spec.rank_table.mindx_compatible and HCCL_FILE in files:
        maps.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": mindx_configmap_name(job.name), **meta},
                     "data": {HCCL_FILE: files[HCCL_FILE], "version": str(restart)}})
    return maps
