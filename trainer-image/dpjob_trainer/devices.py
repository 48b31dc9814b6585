"""Where this rank computes: the backend, its device, the process group and the DDP wrap."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.parallel import DistributedDataParallel

from .config import ConfigError, TrainConfig
from .distributed import CommHook, init_process_group
from .env import DistEnv, device_for, select_backend
from .handshake import WarmCause


def _npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return True


def _device_count(backend: str) -> int:
    if backend == "nccl":
        return torch.cuda.device_count()
    if backend == "hccl":
        return int(torch.npu.device_count())  # type: ignore[attr-defined]
    return 0


def setup_device(cfg: TrainConfig, env: DistEnv,
                 on_cause: Callable[[WarmCause], None] | None = None) -> tuple[str, torch.device]:
    """Pick the backend and this rank's device, make it current, and join the process group."""
    backend = select_backend(
        env.requested_backend, cuda_available=torch.cuda.is_available(), npu_available=_npu_available()
    )
    device = torch.device(device_for(backend, env.local_rank, device_count=_device_count(backend)))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif device.type == "npu":
        torch.npu.set_device(device)  # type: ignore[attr-defined]
    if env.joins_process_group:
        init_process_group(env, backend, str(device), rendezvous_timeout=cfg.rendezvous_timeout,
                           collective_timeout=cfg.collective_timeout, on_cause=on_cause)
    return backend, device


def wrap_for_ddp(
    model: torch.nn.Module, cfg: TrainConfig, env: DistEnv, device: torch.device
) -> tuple[torch.nn.Module, CommHook | None]:
    """The module the loop trains and its gradient hook: DDP in a process group, else the model."""
    if not env.joins_process_group:
        if cfg.grad_reduction not in ("mean", "sum"):
            raise ConfigError(f"--grad-reduction must be mean or sum, got {cfg.grad_reduction!r}")
        return model, None
    # DDP broadcasts rank 0's parameters here: the second guarantee (after the shared seed)
    # that every rank starts identical.
    device_ids = [device.index] if device.type in ("cuda", "npu") else None
    train_model = DistributedDataParallel(model, device_ids=device_ids)
    hook = CommHook(reduction=cfg.grad_reduction, world_size=env.world_size, device=device)
    train_model.register_comm_hook(None, hook.allreduce)
    return train_model, hook
