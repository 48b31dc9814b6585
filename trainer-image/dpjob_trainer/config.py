"""What a run trains, from the command line; pure (neither torch nor mindspore).

``RunConfig`` holds the flags both frameworks honour with the same meaning; ``TrainConfig`` adds
the ones only the torch loop implements. ``from_args`` takes a parsed command line (__main__.py's
parser, shared by both frameworks) and keeps the fields the config has.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from .stragglers import DEFAULT_FACTOR

_Config = TypeVar("_Config", bound="RunConfig")


class ConfigError(ValueError):
    """A flag combination or checkpoint that cannot work; reported with exit code 2."""


@dataclass(frozen=True)
class RunConfig:
    """The flags of every framework. None means "the task's default"."""

    task: str = "mlp"
    seed: int = 0
    steps: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    momentum: float = 0.0
    weight_decay: float = 0.0
    grad_reduction: str = "mean"
    dataset_size: int | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = True
    report_dir: str | None = None
    log_every: int = 10

    @classmethod
    def from_args(cls: type[_Config], args: argparse.Namespace) -> _Config:
        """The config of a parsed command line: every field the namespace has, defaults for the rest."""
        names = {f.name for f in dataclasses.fields(cls)}
        fields: dict[str, Any] = {k: v for k, v in vars(args).items() if k in names}
        return cls(**fields)


@dataclass(frozen=True)
class TrainConfig(RunConfig):
    """Everything the torch loop needs from the command line. None means "the task's default"."""

    entrypoint: str | None = None
    epochs: float | None = None
    optimizer: str = "sgd"
    grad_accum: int = 1
    clip_grad_norm: float = 0.0
    amp: bool = False  # the older name of precision bf16
    precision: str = "fp32"  # fp32, bf16 or fp16 (precision.py)
    tail: str = "keep"
    shuffle: bool | None = None
    model_width: int | None = None  # --task transformer: the model's width (its default 256)
    num_workers: int = 0
    rendezvous_timeout: float = 900.0
    collective_timeout: float = 1800.0
    shutdown_timeout: float = 30.0
    hang_after_step: int = 0  # test hook (hidden flag): block after this step in the first gang
    nonfinite: str = "stop"  # NaN/Inf loss or gradient: stop (exit 3) or skip the update
    max_nonfinite_steps: int = 3  # --nonfinite skip: more consecutive non-finite steps than this stop
    inject_nan_at_step: int = 0  # test hook (hidden flag): NaN loss from this step on one rank
    inject_nan_steps: int = 1  # test hook (hidden flag): for this many consecutive steps
    straggler_factor: float = DEFAULT_FACTOR  # a rank this much slower than the median is a straggler
    slow_rank: int = -1  # test hook (hidden flag): this rank sleeps --slow-seconds in every step of the first gang
    slow_seconds: float = 0.0
