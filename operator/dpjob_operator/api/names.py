"""Deterministic names of everything a job owns (design section 3)."""

from __future__ import annotations

from collections.abc import Sequence

from dpjob_operator.api.spec import Job


def rank_pod_name(job_name: str, index: int) -> str:
    return f"{job_name}-rank-{index}"


def service_name(job_name: str) -> str:
    return job_name


def ranktable_configmap_name(job_name: str) -> str:
    return f"{job_name}-ranktable"


def ranktable_configmap_names(job_name: str, files: Sequence[str]) -> dict[str, str]:
    """File -> the ConfigMap that holds it: one map per file, so each file may use a map's whole
    1 MiB. The first file keeps ``<job>-ranktable``; the others add their stem
    (``<job>-ranktable-hccl`` for ``hccl.json`` next to the generic table)."""
    return {file: ranktable_configmap_name(job_name) + ("" if i == 0 else f"-{file.split('.')[0]}")
            for i, file in enumerate(files)}


def env_configmap_name(job_name: str) -> str:
    """The ConfigMap of the environment every rank shares (the rank pods' ``envFrom``)."""
    return f"{job_name}-env"


def mindx_configmap_name(job_name: str) -> str:
    """The name ascend-operator's images expect (MindX: rings-config-<job>)."""
    return f"rings-config-{job_name}"


def rank_pod_fqdn(job: Job, index: int, cluster_domain: str = "cluster.local") -> str:
    """Stable DNS name of a rank pod through the headless Service; resolves before readiness."""
    return f"{rank_pod_name(job.name, index)}.{service_name(job.name)}.{job.namespace}.svc.{cluster_domain}"


def workload_name(job_name: str) -> str:
    """The job's scheduling.k8s.io Workload: the gang's template, one per job."""
    return job_name


def pod_group_name(job_name: str, restart: int) -> str:
    """One PodGroup per gang generation: PodGroups are immutable, and a restart may resize the gang."""
    return f"{job_name}-gang-{restart}"
