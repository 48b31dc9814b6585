"""Joining the process group, and the gradient all-reduce hook that DDP calls.

Rendezvous: outside torchrun we build the TCPStore ourselves instead of ``init_method=env://``,
for two reasons. (1) The rendezvous deadline (``--rendezvous-timeout``: how long rank pods may
take to be scheduled) and the collective timeout (how long one all-reduce may hang) are
different knobs; env:// ties them together. (2) A timeout can then be reported as what it is:
"waited N s for MASTER_ADDR:MASTER_PORT". Under torchrun the agent already owns a store on
MASTER_PORT, so we use env:// (which connects to the agent's store) and only the collective
timeout applies.

The comm hook replaces DDP's built-in all-reduce with an equivalent one that (a) implements
``--grad-reduction sum`` (all-reduce without dividing by the world size, i.e. N x the mean
gradient, MindSpore's ``mean=False``) and (b) timestamps the moment each gradient bucket becomes
ready, which is how exposed communication is measured (see CommHook).
"""

# No "from __future__ import annotations" here: DDP.register_comm_hook inspects the hook's
# annotations at runtime and rejects string annotations.

import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .env import DistEnv, bound_device
from .handshake import FOLLOW_SECONDS, GangMovedOn, WarmCause, blame, gather, join
from .warm import PREVIOUS_ENV

#: A rank that reached a rank 0 still running the previous gang tries again this soon.
STALE_RETRY_SECONDS = 0.05
#: A rank that could not reach rank 0's store tries again after this, doubling up to MAX_RETRY_SECONDS.
FIRST_RETRY_SECONDS = 0.05
MAX_RETRY_SECONDS = 1.0


class RendezvousError(RuntimeError):
    """The process group could not be formed; the message names the address waited for."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0].rstrip(". ") if text else type(exc).__name__


def _connect_store(env: DistEnv, host: str, port: int, rendezvous_timeout: float,
                   on_cause: Callable[[WarmCause], None] | None = None) -> dist.TCPStore:
    """Rank 0 listens on MASTER_PORT and waits for every rank; the others connect to it, retrying
    until ``rendezvous_timeout``. RendezvousError says which side gave up and why."""
    address = env.rendezvous_address
    deadline = time.monotonic() + rendezvous_timeout
    store = None
    last_error = "no attempt made"
    retry = FIRST_RETRY_SECONDS
    while store is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            who = (
                f"rank 0 waited for the other {env.world_size - 1} rank(s) to connect to port {env.master_port}"
                if env.rank == 0
                else f"rank {env.rank} could not reach the rank-0 store"
            )
            raise RendezvousError(
                f"rendezvous at MASTER_ADDR:MASTER_PORT={address} timed out after {rendezvous_timeout:g}s "
                f"({who}; last error: {last_error}); check that all {env.world_size} ranks are running and "
                f"that MASTER_ADDR/MASTER_PORT point at rank 0, or raise --rendezvous-timeout"
            )
        try:
            store = dist.TCPStore(
                host,
                port,
                env.world_size,
                is_master=env.rank == 0,
                timeout=timedelta(seconds=max(remaining, 0.1)),
                wait_for_workers=True,
            )
        except (RuntimeError, OSError, TimeoutError, ValueError) as exc:
            last_error = _first_line(exc)
            if env.rank == 0 and "address already in use" in last_error.lower():
                raise RendezvousError(
                    f"rank 0 cannot listen on MASTER_PORT={env.master_port} ({last_error}); pick a free MASTER_PORT"
                ) from exc
            # Clients retry: the rank-0 pod's DNS name may not resolve yet, or its store not listen yet.
            # Soon at first (a warm restart's rank 0 listens again within a second), then every second.
            time.sleep(min(retry, max(deadline - time.monotonic(), 0)))
            retry = min(retry * 2, MAX_RETRY_SECONDS)
            continue
        if not _handshake(store, env, on_cause):
            # A rank 0 of the previous gang, not yet gone: wait for this gang's (handshake.py).
            last_error = f"rank 0 at {address} still runs a gang older than {env.generation}"
            store = None
            time.sleep(STALE_RETRY_SECONDS)
    return store


def _handshake(store: dist.TCPStore, env: DistEnv, on_cause: Callable[[WarmCause], None] | None) -> bool:
    """True when this rank joined its gang; False: try again (handshake.py)."""
    previous = os.environ.get(PREVIOUS_ENV, "")
    if env.rank != 0:
        try:
            return join(store, env.rank, env.generation, previous)
        except GangMovedOn:
            raise
        except (RuntimeError, OSError, TimeoutError):
            return False  # the rank 0 of the previous gang went away while we spoke: the new one comes
    try:
        follow = FOLLOW_SECONDS if env.warm_restart > 0 else None
        cause = blame(gather(store, env.world_size, env.generation, previous, follow))
    except GangMovedOn:
        raise
    except (RuntimeError, OSError, TimeoutError) as exc:
        raise RendezvousError(f"rendezvous at {env.rendezvous_address} for gang {env.generation} failed: "
                              f"{_first_line(exc)}") from exc
    if cause is not None and on_cause is not None:
        on_cause(cause)
    return True


def init_process_group(
    env: DistEnv, backend: str, device: str, *, rendezvous_timeout: float, collective_timeout: float,
    on_cause: Callable[[WarmCause], None] | None = None,
) -> None:
    """Join the job's process group on ``device`` (this process's own, from LOCAL_RANK) or raise
    RendezvousError."""
    collective = timedelta(seconds=collective_timeout)
    address = env.rendezvous_address
    bound = bound_device(backend, device)
    device_id = torch.device(bound) if bound is not None else None
    if env.under_torchrun:
        try:
            dist.init_process_group(backend, init_method="env://", timeout=collective, device_id=device_id)
        except (RuntimeError, OSError, TimeoutError) as exc:
            raise RendezvousError(
                f"joining the torchrun process group via {address} failed: {_first_line(exc)}") from exc
        return

    if env.master_addr is None or env.master_port is None:  # read_env requires both when WORLD_SIZE > 1
        raise RendezvousError("a process group of more than one rank needs MASTER_ADDR and MASTER_PORT; set both")
    store = _connect_store(env, env.master_addr, env.master_port, rendezvous_timeout, on_cause)
    try:
        dist.init_process_group(backend, store=store, rank=env.rank, world_size=env.world_size, timeout=collective,
                                device_id=device_id)
    except (RuntimeError, OSError, TimeoutError) as exc:
        raise RendezvousError(
            f"forming the {backend} process group after rendezvous at {address} failed: {_first_line(exc)}") from exc


class CommHook:
    """DDP all-reduce hook: mean or sum reduction, plus exposed-communication timing.

    Exposed communication is the part of the gradient all-reduce that backward compute did not
    hide: the time from the *last* bucket becoming ready (all gradient compute done) to
    ``backward()`` returning (DDP waits for every bucket there and copies results back).
    On CPU/gloo that is host wall time (``perf_counter``). On CUDA the host does not wait, so
    CUDA events are recorded on the compute stream instead and the elapsed GPU time is read
    once the step has synchronised. It includes DDP's copy-back of reduced buckets, which is
    small; it excludes the optimizer step (DDP has no communication there).
    """

    def __init__(self, *, reduction: str, world_size: int, device: torch.device) -> None:
        if reduction not in ("mean", "sum"):
            raise ValueError(f"--grad-reduction must be mean or sum, got {reduction!r}")
        self.mean = reduction == "mean"
        self.world_size = world_size
        self.cuda = device.type == "cuda"
        self._ready_at: float | None = None
        self._ready_event: Any = None

    def allreduce(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if self.cuda:
            self._ready_event = torch.cuda.Event(enable_timing=True)
            self._ready_event.record()
        else:
            self._ready_at = time.perf_counter()
        buffer = bucket.buffer()
        if self.mean:
            buffer.div_(self.world_size)  # what DDP's default hook does: sum of (g / N)
        # all_reduce is untyped (a decorated function); the annotations say what it returns.
        work = dist.all_reduce(buffer, group=state, async_op=True)
        future: torch.futures.Future[list[torch.Tensor]] = work.get_future()
        reduced: torch.futures.Future[torch.Tensor] = future.then(lambda fut: fut.value()[0])
        return reduced

    def start_backward(self) -> None:
        """Forget the previous backward's marks (no_sync micro-steps fire no hooks)."""
        self._ready_at = None
        self._ready_event = None

    def end_backward(self) -> Any:
        """Call right after ``backward()`` returns; returns a token for ``exposed_seconds``."""
        if self.cuda:
            if self._ready_event is None:
                return None
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            return (self._ready_event, done)
        if self._ready_at is None:
            return None
        return time.perf_counter() - self._ready_at

    @staticmethod
    def exposed_seconds(token: Any) -> float:
        """Resolve a token; on CUDA call only after the step synchronised (it then never blocks)."""
        if token is None:
            return 0.0
        if isinstance(token, float):
            return max(token, 0.0)
        start, end = token
        end.synchronize()
        milliseconds: float = start.elapsed_time(end)
        return max(milliseconds / 1000.0, 0.0)


def destroys_group_at_exit(backend: str) -> bool:
    """Whether a finished rank destroys its process group before exiting, or leaves without it.

    gloo holds nothing that the kernel does not release when the process exits (sockets, threads,
    memory), and its group's destructor can hang while it holds the GIL (pytorch/pytorch#75097:
    both ranks logged "done" and one never exited, with no ``shutdown_timeout`` line in 120 s, so
    no Python timeout could fire). A gloo rank therefore leaves without destroying its group, as
    most gloo scripts do. nccl and hccl destroy it (bounded by ``shutdown_process_group``): their
    communicators hold device resources that a clean shutdown releases.
    """
    return backend != "gloo"


def shutdown_process_group(timeout: float = 30.0, destroy: Callable[[], None] | None = None) -> bool:
    """``dist.destroy_process_group()``, bounded: True if it returned within ``timeout`` seconds.

    It can hang after training has finished (pytorch/pytorch#75097, open). A pod that never exits
    keeps its job from ever Succeeding, while everything worth keeping (checkpoint, report) is
    already written. So the caller gives up waiting and exits the process hard instead. A hang that
    holds the GIL defeats this timeout: gloo's does, so gloo groups are never destroyed
    (``destroys_group_at_exit``).
    """
    done = threading.Event()
    destroy = destroy or dist.destroy_process_group

    def run() -> None:
        try:
            destroy()
        except Exception:  # noqa: BLE001 - a peer already gone; the group is being dropped anyway
            pass
        finally:
            done.set()

    threading.Thread(target=run, name="destroy-process-group", daemon=True).start()
    return done.wait(timeout)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """In-place SUM all-reduce when a process group exists; identity for a single process."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor
