"""The MindSpore launch environment: msrun's dynamic cluster, the Ascend rank table, or nothing.

Pure (no mindspore): it only decides whether the environment can work and what to tell the user;
the rank and group size themselves come from ``mindspore.communication`` after ``init()``,
because under msrun they are assigned by the scheduler, not known in advance.

Three start-ups, checked in this order (docs/trainer.md, "MindSpore"):

* **msrun** (``MS_ROLE`` set): msrun exports ``MS_ROLE`` (``MS_WORKER``, or ``MS_SCHED`` for the
  one scheduler process it also runs), ``MS_SCHED_HOST``, ``MS_SCHED_PORT``, ``MS_WORKER_NUM``,
  and per worker ``MS_NODE_ID``/``RANK_ID``, ``RANK_SIZE`` and ``DEVICE_ID`` (the local index).
  torch's ``WORLD_SIZE``/``MASTER_ADDR`` are not needed and are ignored: the operator sets both
  contracts in a ``framework: mindspore`` pod.
* **rank table** (``RANK_TABLE_FILE`` and ``RANK_ID``): Ascend's older start-up, one process per
  device started by hand with ``RANK_ID``, ``RANK_SIZE`` and ``DEVICE_ID``; HCCL reads the table.
* **nothing**: one process, no group: the single-device baseline data parallel must equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..env import EnvError, env_int

ROLES = ("MS_WORKER", "MS_SCHED")


@dataclass(frozen=True)
class MsEnv:
    """How this process was started; ``expected_world`` is the launcher's promise, checked after init()."""

    mode: str  # "msrun", "ranktable" or "single"
    role: str | None  # MS_WORKER / MS_SCHED under msrun
    expected_world: int
    rank_hint: int | None  # RANK_ID / MS_NODE_ID when the launcher assigned one
    local_rank: int  # DEVICE_ID (msrun exports the local index there), else LOCAL_RANK, else 0
    job_name: str
    restart_count: int
    rank_table_file: str | None

    @property
    def distributed(self) -> bool:
        """True when ``mindspore.communication.init()`` must run."""
        return self.mode != "single"

    @property
    def scheduler(self) -> bool:
        """msrun's scheduler process: it runs the script too, but only to host the cluster."""
        return self.role == "MS_SCHED"


def _msrun(environ: Mapping[str, str], role: str) -> tuple[int, int | None]:
    """Check msrun's variables; return (worker number, this worker's id if known)."""
    if role not in ROLES:
        raise EnvError(f"MS_ROLE must be one of {', '.join(ROLES)}, got {role!r}")
    host = (environ.get("MS_SCHED_HOST") or "").strip()
    port, workers = env_int(environ, "MS_SCHED_PORT"), env_int(environ, "MS_WORKER_NUM")
    if not host:
        raise EnvError("MS_ROLE is set but MS_SCHED_HOST (the msrun scheduler's host) is missing; launch with msrun")
    if port is None or not 1 <= port <= 65535:
        raise EnvError(f"MS_SCHED_PORT must be a port in 1..65535, got {environ.get('MS_SCHED_PORT')!r}")
    if workers is None or workers < 1:
        raise EnvError(f"MS_WORKER_NUM must be >= 1 (the number of workers), got {environ.get('MS_WORKER_NUM')!r}")
    node = env_int(environ, "MS_NODE_ID")
    node = node if node is not None else env_int(environ, "RANK_ID")
    if role == "MS_WORKER" and node is not None and not 0 <= node < workers:
        raise EnvError(f"MS_NODE_ID/RANK_ID must be in [0, MS_WORKER_NUM-1] = [0, {workers - 1}], got {node}")
    return workers, node


def _ranktable(environ: Mapping[str, str]) -> tuple[int, int]:
    """Check the rank-table start-up's per-process variables; return (RANK_SIZE, RANK_ID)."""
    rank, size, device = env_int(environ, "RANK_ID"), env_int(environ, "RANK_SIZE"), env_int(environ, "DEVICE_ID")
    assert rank is not None
    if size is None or size < 1:
        raise EnvError("RANK_TABLE_FILE and RANK_ID are set but RANK_SIZE (the number of processes) is missing")
    if not 0 <= rank < size:
        raise EnvError(f"RANK_ID must be in [0, RANK_SIZE-1] = [0, {size - 1}], got {rank}")
    if device is None or device < 0:
        raise EnvError("the rank-table start-up needs DEVICE_ID (this process's device index) per process")
    return size, rank


def parse_ms_env(environ: Mapping[str, str]) -> MsEnv:
    """Validate the launch environment of ``--framework mindspore``; EnvError names what to fix."""
    role = (environ.get("MS_ROLE") or "").strip() or None
    table = (environ.get("RANK_TABLE_FILE") or "").strip() or None
    if role is not None:
        mode = "msrun"
        world, hint = _msrun(environ, role)
    elif table and env_int(environ, "RANK_ID") is not None:
        mode = "ranktable"
        world, hint = _ranktable(environ)
    else:
        torch_world = env_int(environ, "WORLD_SIZE")
        if torch_world is not None and torch_world > 1:
            raise EnvError(
                f"--framework mindspore got torch's WORLD_SIZE={torch_world} but no MindSpore start-up: launch it "
                f"with msrun (which sets MS_ROLE, MS_SCHED_HOST, MS_SCHED_PORT, MS_WORKER_NUM) or set "
                f"RANK_TABLE_FILE, RANK_ID, RANK_SIZE and DEVICE_ID per process")
        mode, world, hint = "single", 1, None
    local = env_int(environ, "DEVICE_ID")
    local = local if local is not None else env_int(environ, "LOCAL_RANK")
    restart = env_int(environ, "DPJOB_RESTART_COUNT") or 0
    if (local or 0) < 0 or restart < 0:
        raise EnvError("DEVICE_ID/LOCAL_RANK and DPJOB_RESTART_COUNT must be >= 0")
    return MsEnv(mode=mode, role=role, expected_world=world, rank_hint=hint, local_rank=local or 0,
                 job_name=(environ.get("DPJOB_NAME") or "").strip() or "local", restart_count=restart,
                 rank_table_file=table)
