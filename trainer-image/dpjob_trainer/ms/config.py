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
import dataclasses
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError, RunConfig, TrainConfig

TASKS = ("linear", "mlp")
# The torch-only flags (TrainConfig's own fields) this loop does not reproduce: refused when set to
# anything but their default.
UNSUPPORTED = (
    "--entrypoint", "--epochs", "--optimizer", "--grad-accum", "--clip-grad-norm", "--amp", "--precision",
    "--model-width", "--tail", "--shuffle", "--num-workers", "--nonfinite", "--hang-after-step",
    "--inject-nan-at-step", "--slow-rank",
)
# Per-task defaults, the torch tasks' (tasks.py): the same shapes and the same schedule.
DEFAULTS: dict[str, dict[str, Any]] = {
    "linear": {"lr": 0.02, "steps": 500, "dataset_size": 4},
    "mlp": {"batch_size": 32, "lr": 0.1, "steps": 200, "dataset_size": 2048},
}


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _is_set(args: argparse.Namespace, dest: str, default: Any) -> bool:
    return bool(getattr(args, dest, default) != default)


@dataclass(frozen=True)
class MsConfig(RunConfig):
    """The MindSpore run's settings: the flags both frameworks share (config.py); None means "the
    task's default" until ``resolve``."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MsConfig:
        """Take the shared flags; refuse the ones only the torch loop implements."""
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
        used = [flag for flag in UNSUPPORTED if _is_set(args, _dest(flag), defaults[_dest(flag)])]
        if used:
            raise ConfigError(f"--framework mindspore does not support {', '.join(used)}; "
                              f"drop them or use --framework torch")
        if args.task not in TASKS:
            raise ConfigError(f"--framework mindspore: --task must be one of {', '.join(TASKS)}, got {args.task!r}")
        if args.grad_reduction not in ("mean", "sum"):
            raise ConfigError(f"--grad-reduction must be mean or sum, got {args.grad_reduction!r}")
        return super().from_args(args)

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
