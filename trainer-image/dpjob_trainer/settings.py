"""The numbers a run trains with once its task is known: the flags, else the task's defaults.

Also the checks of flag combinations that only the task can decide (a map-style dataset, a shard
plan that fits the world size), each a ``ConfigError`` (exit code 2) naming the flag to change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any

import torch

from .config import ConfigError, TrainConfig
from .env import DistEnv
from .nonfinite import NonfinitePolicy
from .precision import Precision, requested_precision, setup_precision
from .sharding import ShardPlan
from .tasks import Task


@dataclass(frozen=True)
class Settings:
    """The effective batch size, learning rate, data order and length of the run."""

    batch_size: int
    lr: float
    shuffle: bool
    plan: ShardPlan
    total_steps: int


def resolve_settings(cfg: TrainConfig, env: DistEnv, task: Task) -> Settings:
    """The flags, with the task's defaults for those not given; ConfigError when they cannot work."""
    d = task.defaults
    batch_size = cfg.batch_size or d.get("batch_size", 32)
    lr = cfg.lr if cfg.lr is not None else d.get("lr", 0.01)
    shuffle = cfg.shuffle if cfg.shuffle is not None else d.get("shuffle", True)
    _check_flags(cfg)
    if not isinstance(task.dataset, Sized):  # load_entrypoint checked it; this tells mypy too
        raise ConfigError(f"task {task.name}: the dataset must be map-style (__len__ and __getitem__)")
    try:
        plan = ShardPlan(
            len(task.dataset), env.world_size, env.rank, batch_size, accum=cfg.grad_accum,
            seed=cfg.seed, shuffle=shuffle, drop_tail=cfg.tail == "drop",
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if cfg.epochs is not None:
        total_steps = math.ceil(cfg.epochs * plan.steps_per_epoch)
    else:
        total_steps = cfg.steps if cfg.steps is not None else d.get("steps", 100)
    if total_steps < 0:
        raise ConfigError(f"--steps must be >= 0, got {total_steps}")
    return Settings(batch_size=batch_size, lr=lr, shuffle=shuffle, plan=plan, total_steps=total_steps)


def _check_flags(cfg: TrainConfig) -> None:
    if cfg.grad_accum < 1:
        raise ConfigError(f"--grad-accum must be >= 1, got {cfg.grad_accum}")
    if cfg.tail not in ("keep", "drop"):
        raise ConfigError(f"--tail must be keep or drop, got {cfg.tail!r}")
    try:
        NonfinitePolicy(cfg.nonfinite, cfg.max_nonfinite_steps).validate()
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def resolve_precision(cfg: TrainConfig, device: torch.device, log: Callable[..., None]) -> Precision:
    """``--precision``/``--amp`` on this device; a downgrade is logged as a warning."""
    try:
        precision, warning = setup_precision(requested_precision(cfg.precision, cfg.amp), device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if warning:
        log("warning", message=f"--precision: {warning}")
    return precision


def make_optimizer(cfg: TrainConfig, lr: float, model: torch.nn.Module) -> torch.optim.Optimizer:
    params: Any = model.parameters()
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    raise ConfigError(f"--optimizer must be sgd or adamw, got {cfg.optimizer!r}")
