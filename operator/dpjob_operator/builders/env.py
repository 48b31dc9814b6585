"""The environment contract of design section 4: what torchrun, torch.distributed, MindSpore
and OneFlow read, computed purely from the job and the rank index.

Rule for conflicts: a variable the user sets explicitly in the container wins over ours (we
skip ours), so a user can always override; everything else is ours. ``RANK``/``LOCAL_RANK``
are only set when one process runs per pod: with several, torchrun (or the framework's
launcher) owns the per-process values and a stale pod-level ``RANK`` would mislead it
(kubeflow/trainer#1790).
"""

from __future__ import annotations

from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api.names import rank_pod_fqdn
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.spec import Job
from dpjob_operator.api.termination import TERMINATION_LOG


def rank_table_file(job: Job) -> str | None:
    """Path of the rank table file inside the pod, or None when rank tables are disabled."""
    rt = job.spec.rank_table
    if rt.format == "none":
        return None
    hccl = rt.format == "hccl" or (rt.format == "auto" and job.spec.accelerator == "npu")
    if hccl and rt.mindx_compatible:
        return f"{c.MINDX_MOUNT_PATH}/{c.RANKTABLE_KEY_HCCL}"
    key = c.RANKTABLE_KEY_HCCL if hccl else c.RANKTABLE_KEY_GENERIC
    return f"{rt.mount_path.rstrip('/')}/{key}"


def effective_backend(job: Job, pool: PoolConfig) -> str:
    """The job's backend, else its node pool's ``defaultBackend`` (the chart's pools.*.defaultBackend)."""
    return job.spec.backend or pool.default_backend


def metrics_port(job: Job) -> int:
    """Where the trainer serves Prometheus metrics: the trainer container's port named ``metrics``
    when the template declares one, else the one the pod builder adds (9090). Exported to the
    pod as ``DPJOB_METRICS_PORT``; the operator reads rank 0's progress there."""
    containers = (job.spec.template.get("spec") or {}).get("containers") or []
    trainer: dict[str, Any] = next((ctr for ctr in containers if ctr.get("name") == c.TRAINER_CONTAINER), {})
    for port in trainer.get("ports") or []:
        if port.get("name") == c.METRICS_PORT_NAME and port.get("containerPort"):
            return int(port["containerPort"])
    return c.METRICS_PORT


def _dpjob_env(job: Job, index: int, restart: int, pool: PoolConfig, master: str) -> list[tuple[str, str]]:
    """Our own DPJOB_* contract: what the trainer reads whatever the launcher."""
    spec = job.spec
    return [
        ("PYTHONUNBUFFERED", "1"),
        ("DPJOB_NAME", job.name),
        ("DPJOB_NAMESPACE", job.namespace),
        ("DPJOB_RESTART_COUNT", str(restart)),
        ("DPJOB_ACCELERATOR", spec.accelerator),
        ("DPJOB_BACKEND", effective_backend(job, pool)),
        ("DPJOB_FRAMEWORK", spec.framework),
        ("DPJOB_REPLICAS", str(spec.replicas)),
        ("DPJOB_NODE_RANK", str(index)),
        ("DPJOB_NPROC_PER_NODE", str(spec.procs_per_replica)),
        ("DPJOB_MASTER_ADDR", master),
        ("DPJOB_MASTER_PORT", str(spec.rendezvous.port)),
        ("DPJOB_RENDEZVOUS_TIMEOUT", str(spec.rendezvous.timeout_seconds)),
        # torchrun's agent writes the first failed worker's error there: the termination message.
        ("TORCHELASTIC_ERROR_FILE", TERMINATION_LOG),
        ("DPJOB_METRICS_PORT", str(metrics_port(job))),
    ] + ([("DPJOB_STRAGGLER_FACTOR", f"{spec.run_policy.straggler_factor:g}")]
         if spec.run_policy.straggler_factor is not None else [])


def _launcher_env(job: Job, index: int, master: str) -> list[tuple[str, str]]:
    """What OneFlow, torchrun's elastic rendezvous or torch's static env:// init read."""
    spec = job.spec
    port = str(spec.rendezvous.port)
    one_proc = spec.procs_per_replica == 1
    if spec.framework == "oneflow":
        # OneFlow asserts all five or none (env_util.HasAllMultiClientEnvVars).
        if not one_proc:
            return []
        return [("MASTER_ADDR", master), ("MASTER_PORT", port), ("WORLD_SIZE", str(spec.world_size)),
                ("RANK", str(index)), ("LOCAL_RANK", "0")]
    if spec.rendezvous.mode == "elastic":
        return [
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ENDPOINT", f"{master}:{port}"),
            ("PET_RDZV_ID", job.uid or job.name),
            ("PET_RDZV_CONF", f"join_timeout={spec.rendezvous.timeout_seconds}"),
            ("PET_NNODES", f"{spec.rendezvous.min_replicas}:{spec.rendezvous.max_replicas}"),
            ("PET_NPROC_PER_NODE", str(spec.procs_per_replica)),
            ("PET_MAX_RESTARTS", str(spec.rendezvous.max_restarts)),
        ]
    env = [
        ("MASTER_ADDR", master),
        ("MASTER_PORT", port),
        ("WORLD_SIZE", str(spec.world_size)),
        ("PET_NNODES", str(spec.replicas)),
        ("PET_NPROC_PER_NODE", str(spec.procs_per_replica)),
        ("PET_NODE_RANK", str(index)),
        ("PET_MASTER_ADDR", master),
        ("PET_MASTER_PORT", port),
    ]
    if one_proc:
        env += [("RANK", str(index)), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")]
    return env


def _mindspore_env(job: Job, index: int, master: str) -> list[tuple[str, str]]:
    """msrun / dynamic cluster: MS_WORKER_NUM counts processes (devices), not pods."""
    spec = job.spec
    env = [
        ("MS_ROLE", "MS_WORKER"),
        ("MS_SCHED_HOST", master),
        ("MS_SCHED_PORT", str(spec.rendezvous.port)),
        ("MS_WORKER_NUM", str(spec.world_size)),
        ("MS_LOCAL_WORKER", str(spec.procs_per_replica)),
        ("MS_NODE_RANK", str(index)),
        ("RANK_SIZE", str(spec.world_size)),
        # Exactly one scheduler: the launcher in rank pod 0 starts it.
        ("DPJOB_MS_SCHEDULER", "1" if index == 0 else "0"),
    ]
    if spec.procs_per_replica == 1:
        env += [("MS_NODE_ID", str(index)), ("RANK_ID", str(index))]
    return env


def build_rank_env(job: Job, index: int, restart: int, pool: PoolConfig,
                   cluster_domain: str = "cluster.local") -> list[tuple[str, str]]:
    """Ordered (name, value) pairs for rank pod ``index`` of gang generation ``restart``."""
    master = rank_pod_fqdn(job, 0, cluster_domain)
    env = _dpjob_env(job, index, restart, pool, master) + _launcher_env(job, index, master)
    if job.spec.framework == "mindspore":
        env += _mindspore_env(job, index, master)
    table = rank_table_file(job)
    if table:
        env.append(("RANK_TABLE_FILE", table))
    env += sorted(pool.env.items())
    return _dedupe(env)


def _dedupe(env: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, int] = {}
    out: list[tuple[str, str]] = []
    for name, value in env:
        if name in seen:
            out[seen[name]] = (name, value)
        else:
            seen[name] = len(out)
            out.append((name, value))
    return out


def merge_env(user_env: list[dict[str, Any]] | None, ours: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """User-set variables win; ours come first so the user's $(VAR) references can use them."""
    user_env = list(user_env or [])
    user_names = {e.get("name") for e in user_env}
    return [{"name": n, "value": v} for n, v in ours if n not in user_names] + user_env
