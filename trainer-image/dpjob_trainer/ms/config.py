"""What the MindSpore loop trains, from the shared command line; pure (no mindspore).

The torch trainer's flags are parsed by the same parser (__main__.py), so ``--steps``,
``--batch-size``, ``--lr``, ``--grad-reduction``, ``--checkpoint-dir``, ``--report`` mean the same
thing under both frameworks. Flags whose torch behaviour this backend does not reproduce
(accumulation, clipping, AMP, AdamW, shuffling, user entry points, ...) are refused with exit code
2 instead of being ignored: a run that silently trains differently from what was asked is the
worse failure.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

TASKS = ("linear", "mlp")
# flag -> (argparse dest, value that means "not used"): refused when set to anything else.
UNSUPPORTED: dict[str, tuple[str, Any]] = {
    "--entrypoint": ("entrypoint", None),
    "--epochs": ("epochs", None),
    "--optimizer": ("optimizer", "sgd"),
    "--grad-accum": ("grad_accum", 1),
    "--clip-grad-norm": ("clip_grad_norm", 0.0),
    "--amp": ("amp", False),
    "--precision": ("precision", "fp32"),
    "--model-width": ("model_width", None),
    "--tail": ("tail", "keep"),
    "--shuffle": ("shuffle", None),
    "--num-workers": ("num_workers", 0),
    "--nonfinite": ("nonfinite", "stop"),
    "--hang-after-step": ("hang_after_step", 0),
    "--inject-nan-at-step": ("inject_nan_at_step", 0),
    "--slow-rank": ("slow_rank", -1),
}
# Per-task defaults, the torch tasks' (tasks.py): the same shapes and the same schedule.
DEFAULTS: dict[str, dict[str, Any]] = {
    "linear": {"lr": 0.02, "steps": 500, "dataset_size": 4},
    "mlp": {"batch_size": 32, "lr": 0.1, "steps": 200, "dataset_size": 2048},
}


class ConfigError(ValueError):
    """A flag this backend cannot honour; reported as one line with exit code 2."""


@dataclass(frozen=True)
class MsConfig:
    """The MindSpore run's settings; None means "the task's default" until ``resolve``."""

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
    def from_args(cls, args: argparse.Namespace) -> MsConfig:
        """Take the shared flags; refuse the ones only the torch loop implements."""
        used = [flag for flag, (dest, unused) in UNSUPPORTED.items() if getattr(args, dest, unused) != unused]
        if used:
            raise ConfigError(f"--framework mindspore does not support {', '.join(used)}; "
                              f"drop them or use --framework torch")
        if args.task not in TASKS:
            raise ConfigError(f"--framework mindspore: --task must be one of {', '.join(TASKS)}, got {args.task!r}")
        if args.grad_reduction not in ("mean", "sum"):
            raise ConfigError(f"--grad-reduction must be mean or sum, got {args.grad_reduction!r}")
        fields = {k: getattr(args, k) for k in cls.__dataclass_fields__ if hasattr(args, k)}
        return cls(**fields)

    def resolve(self, world_size: int) -> Resolved:
        """Fill the task defaults; the linear task's batch depends on the world size (4 samples)."""
        d = DEFAULTS[self.task]
        size = self.dataset_size or d["dataset_size"]
        if self.task == "linear" and size != 4:
            raise ConfigError("--dataset-size does not apply to --task linear (its dataset is OneFlow's 4 samples)")
        default_batch = d.get("batch_size") or (4 // world_size if 4 % world_size == 0 else 1)
        steps = self.steps if self.steps is not None else d["steps"]
        if steps < 0:
            raise ConfigError(f"--steps must be >= 0, got {steps}")
        if self.checkpoint_every < 0:
            raise ConfigError(f"--checkpoint-every must be >= 0, got {self.checkpoint_every}")
        return Resolved(batch_size=self.batch_size or default_batch,
                        lr=self.lr if self.lr is not None else d["lr"], steps=steps, dataset_size=size)


@dataclass(frozen=True)
class Resolved:
    """The numbers the loop runs with once the world size is known."""

    batch_size: int
    lr: float
    steps: int
    dataset_size: int
