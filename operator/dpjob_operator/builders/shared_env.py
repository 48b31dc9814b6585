"""The environment contract split in two: what every rank shares, and what is each rank's own.

Inline, the whole contract is ~28 variables, 1.4 KB of a 2.3 KB pod. Every write of a pod
(create, binding, two status patches) and every watcher that decodes it pays for those bytes: at
512 ranks on 2 cores the inline environment costs the API server ~1.3 CPU s and ~0.6 s to all
Running (bench/compare.py). What is the same for every rank goes
into one ConfigMap per job, which each rank reads through ``envFrom``; only the few variables
that differ by rank or by gang generation stay in the pod.

The kubelet resolves ``envFrom`` before ``env``, so a variable the user sets in the container
still wins, and a user's ``$(VAR)`` reference can still use ours. Ours is the last
``envFrom`` source, so it wins over a user's own ConfigMap of the same key.
"""

from __future__ import annotations

from typing import Any

from dpjob_operator.api.labels import job_labels
from dpjob_operator.api.names import env_configmap_name
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.env import build_rank_env

#: The variables whose value depends on the rank index or the gang generation: they stay inline.
#: Every other variable of ``build_rank_env`` must be the same for all ranks of a job (a unit test
#: compares ranks and generations, so a new per-rank variable cannot slip into the shared map).
PER_RANK = frozenset({
    "DPJOB_NODE_RANK", "DPJOB_RESTART_COUNT", "PET_NODE_RANK", "RANK",
    "MS_NODE_RANK", "MS_NODE_ID", "RANK_ID", "DPJOB_MS_SCHEDULER",
})


def shared_env(job: Job, pool: PoolConfig, cluster_domain: str = "cluster.local") -> dict[str, str]:
    """The variables every rank of ``job`` shares (the ConfigMap's data)."""
    return {name: value for name, value in build_rank_env(job, 0, 0, pool, cluster_domain) if name not in PER_RANK}


def own_env(job: Job, index: int, restart: int, pool: PoolConfig,
            cluster_domain: str = "cluster.local") -> list[tuple[str, str]]:
    """The variables of rank ``index`` of generation ``restart`` that no other rank has (inline)."""
    return [(name, value) for name, value in build_rank_env(job, index, restart, pool, cluster_domain)
            if name in PER_RANK]


def build_env_configmap(job: Job, pool: PoolConfig, cluster_domain: str = "cluster.local") -> dict[str, Any]:
    """``<job>-env``: written before the first rank pod, which the kubelet will not start without it."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": env_configmap_name(job.name), "namespace": job.namespace, "labels": job_labels(job),
                         "ownerReferences": [job.owner_reference]},
            "data": shared_env(job, pool, cluster_domain)}


def env_from(job: Job) -> dict[str, Any]:
    """The ``envFrom`` source of the shared map: required (the kubelet waits for it, never starts a
    rank without its contract)."""
    return {"configMapRef": {"name": env_configmap_name(job.name)}}
