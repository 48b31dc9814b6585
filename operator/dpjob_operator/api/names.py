"""Deterministic names of everything a job owns (design section 3)."""

from __future__ import annotations

from dpjob_operator.api.spec import Job


def rank_pod_name(job_name: str, index: int) -> str:
    return f"{job_name}-rank-{index}"


def service_name(job_name: str) -> str:
    return job_name


def ranktable_configmap_name(job_name: str) -> str:
    return f"{job_name}-ranktable"


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
