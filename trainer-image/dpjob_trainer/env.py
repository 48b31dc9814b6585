"""The environment contract between the operator (or torchrun) and the trainer.

This module owns parsing and validating the launch environment (design section 4). It is pure:
it reads a mapping, never ``os.environ`` implicitly, and imports no torch, so a broken pod spec
fails in milliseconds with a one-line message instead of after a multi-second torch import or a
rendezvous timeout.

Rules (documented in docs/trainer.md):

* No ``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR`` or ``MASTER_PORT`` at all: a single process
  (world 1). This is the "single device" baseline that data parallel must equal.
* ``RANK`` and ``WORLD_SIZE`` come together; ``0 <= RANK < WORLD_SIZE``.
* ``WORLD_SIZE > 1`` needs ``MASTER_ADDR`` and ``MASTER_PORT`` (1..65535).
* ``LOCAL_RANK`` defaults to 0, ``LOCAL_WORLD_SIZE`` to 1; ``LOCAL_RANK < LOCAL_WORLD_SIZE``.
* Under torchrun (``TORCHELASTIC_RUN_ID`` set) the agent owns the rendezvous store; we only
  record that, so the process group is initialised the torchrun way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .exit_record import restarts_in_place
from .warm import attempt

BACKENDS = ("nccl", "gloo", "hccl")


class EnvError(ValueError):
    """The launch environment is missing or inconsistent; the message says what to set."""


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job, as the launcher described it."""

    world_size: int
    rank: int
    local_rank: int
    local_world_size: int
    master_addr: str | None
    master_port: int | None
    requested_backend: str | None  # DPJOB_BACKEND; None means "pick automatically"
    job_name: str
    restart_count: int
    rank_table_file: str | None
    under_torchrun: bool
    warm_restart: int = 0  # this container's warm restarts before this process (warm.py)

    @property
    def generation(self) -> str:
        """The gang this process belongs to: the pod's generation, then the warm restarts within it."""
        return f"{self.restart_count}.{self.warm_restart}"

    @property
    def distributed(self) -> bool:
        """True when a process group is needed; world 1 trains without one (no DDP)."""
        return self.world_size > 1

    @property
    def joins_process_group(self) -> bool:
        """True when this process forms a process group and trains under DDP: more than one rank,
        or any torchrun launch (its agent already holds the store, and a one-process torchrun then
        runs the same DDP and NCCL path as N processes, which is what a one-GPU check must time)."""
        return self.distributed or self.under_torchrun

    @property
    def rendezvous_address(self) -> str:
        """``host:port`` as a user would type it into MASTER_ADDR/MASTER_PORT."""
        return f"{self.master_addr}:{self.master_port}"


def env_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise EnvError(f"{name} must be an integer, got {raw!r}") from None


def _world(environ: Mapping[str, str]) -> tuple[int, int, str | None, int | None]:
    """WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT, checked against each other."""
    world_size = env_int(environ, "WORLD_SIZE")
    rank = env_int(environ, "RANK")
    master_addr = (environ.get("MASTER_ADDR") or "").strip() or None
    master_port = env_int(environ, "MASTER_PORT")

    if world_size is None and rank is None:
        if master_addr or master_port is not None:
            raise EnvError(
                "MASTER_ADDR/MASTER_PORT are set but WORLD_SIZE and RANK are missing; "
                "set WORLD_SIZE and RANK (or unset MASTER_* to run a single process)"
            )
        world_size, rank = 1, 0
    elif world_size is None:
        raise EnvError(
            f"RANK is set ({rank}) but WORLD_SIZE is missing; set WORLD_SIZE to the total number of processes")
    elif rank is None:
        raise EnvError(f"WORLD_SIZE is set ({world_size}) but RANK is missing; set RANK to this process's global rank")
    if world_size < 1:
        raise EnvError(f"WORLD_SIZE must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise EnvError(f"RANK must be in [0, WORLD_SIZE-1] = [0, {world_size - 1}], got RANK={rank}")

    if world_size > 1:
        if not master_addr:
            raise EnvError(f"WORLD_SIZE={world_size} needs MASTER_ADDR (the rank-0 host); it is missing")
        if master_port is None:
            raise EnvError(f"WORLD_SIZE={world_size} needs MASTER_PORT (the rendezvous port); it is missing")
    if master_port is not None and not 1 <= master_port <= 65535:
        raise EnvError(f"MASTER_PORT must be in 1..65535, got {master_port}")
    return world_size, rank, master_addr, master_port


def _local(environ: Mapping[str, str], world_size: int) -> tuple[int, int]:
    """LOCAL_WORLD_SIZE and LOCAL_RANK (1 and 0 when unset): this node's processes and this one's index."""
    local_world_size = env_int(environ, "LOCAL_WORLD_SIZE", 1)
    local_rank = env_int(environ, "LOCAL_RANK", 0)
    assert local_world_size is not None and local_rank is not None
    if local_world_size < 1:
        raise EnvError(f"LOCAL_WORLD_SIZE must be >= 1, got {local_world_size}")
    if not 0 <= local_rank < local_world_size:
        raise EnvError(
            f"LOCAL_RANK must be in [0, LOCAL_WORLD_SIZE-1] = [0, {local_world_size - 1}], got LOCAL_RANK={local_rank}"
        )
    if local_world_size > world_size:
        raise EnvError(f"LOCAL_WORLD_SIZE ({local_world_size}) cannot exceed WORLD_SIZE ({world_size})")
    return local_world_size, local_rank


def parse_env(environ: Mapping[str, str]) -> DistEnv:
    """Validate the launch environment and return where this process sits.

    Raises EnvError with a message that names the variable to fix.
    """
    world_size, rank, master_addr, master_port = _world(environ)
    local_world_size, local_rank = _local(environ, world_size)

    backend = (environ.get("DPJOB_BACKEND") or "").strip().lower() or None
    if backend == "auto":
        backend = None
    if backend is not None and backend not in BACKENDS:
        raise EnvError(f"DPJOB_BACKEND must be one of {', '.join(BACKENDS)} or auto, got {backend!r}")

    # torchrun exports its own restart counter; the operator's DPJOB_RESTART_COUNT wins when both exist.
    restart_count = env_int(environ, "DPJOB_RESTART_COUNT")
    if restart_count is None:
        restart_count = env_int(environ, "TORCHELASTIC_RESTART_COUNT", 0)
    assert restart_count is not None
    if restart_count < 0:
        raise EnvError(f"DPJOB_RESTART_COUNT must be >= 0, got {restart_count}")
    restart_count += restarts_in_place(environ)  # the generation moves on in place (exit_record.py)

    return DistEnv(
        world_size=world_size,
        rank=rank,
        local_rank=local_rank,
        local_world_size=local_world_size,
        master_addr=master_addr,
        master_port=master_port,
        requested_backend=backend,
        job_name=(environ.get("DPJOB_NAME") or "").strip() or "local",
        restart_count=restart_count,
        rank_table_file=(environ.get("RANK_TABLE_FILE") or "").strip() or None,
        under_torchrun=bool(environ.get("TORCHELASTIC_RUN_ID")),
        warm_restart=attempt(environ),
    )


def select_backend(requested: str | None, *, cuda_available: bool, npu_available: bool) -> str:
    """Pick the collective backend: the requested one if its device exists, else by hardware.

    Auto order is nccl (CUDA), hccl (torch_npu importable), gloo (CPU). An explicit request for
    hardware that is not there is an error rather than a silent CPU fallback: a GPU job that
    quietly trains on CPU is the worse failure.
    """
    if requested == "nccl" and not cuda_available:
        raise EnvError("DPJOB_BACKEND=nccl but CUDA is not available in this container; use gloo or a GPU node")
    if requested == "hccl" and not npu_available:
        raise EnvError("DPJOB_BACKEND=hccl but torch_npu is not importable; use an Ascend image or gloo")
    if requested is not None:
        return requested
    if cuda_available:
        return "nccl"
    if npu_available:
        return "hccl"
    return "gloo"


def device_for(backend: str, local_rank: int, *, device_count: int) -> str:
    """The torch device string for this process: accelerator ``LOCAL_RANK`` or CPU for gloo."""
    if backend == "gloo":
        return "cpu"
    kind = "cuda" if backend == "nccl" else "npu"
    if local_rank >= device_count:
        raise EnvError(
            f"LOCAL_RANK={local_rank} but only {device_count} {kind} device(s) are visible; "
            f"request procsPerReplica <= devices per pod"
        )
    return f"{kind}:{local_rank}"


def bound_device(backend: str, device: str) -> str | None:
    """The device to bind the process group to (``init_process_group(device_id=...)``), or None.

    NCCL communicators belong to one GPU. Unbound, torch guesses ``rank % device_count`` for
    collectives that name no tensor (barrier), which is another process's GPU whenever a pod sees
    more GPUs than it runs processes (procsPerReplica 2 on a node whose 8 GPUs are all visible:
    rank 2 would use cuda:2, not its own cuda:0). Gloo and HCCL take no binding here.
    """
    return device if backend == "nccl" else None
