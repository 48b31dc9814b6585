"""Resume and save one run's checkpoint: every rank agrees on it, none is written from NaN/Inf.

The file format and the finiteness check live in checkpoint.py; this module owns when and by
whom: every rank resumes from the same step or none starts, rank 0 writes and every rank waits.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from . import checkpoint
from .config import ConfigError
from .context import RunContext
from .distributed import all_reduce_max, all_reduce_sum
from .tasks import Task


class Checkpointer:
    """The checkpoint of one rank's run; ``failure`` says why one was refused."""

    def __init__(self, ctx: RunContext, task: Task) -> None:
        self.ctx, self.task = ctx, task
        self.directory = ctx.cfg.checkpoint_dir
        self.step: int | None = None  # step of the checkpoint on disk, when known
        self.failure: str | None = None  # why a checkpoint was refused, for the stderr line

    def resume(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
        """Load the checkpoint every rank sees; the step to start from (0 without one)."""
        cfg = self.ctx.cfg
        state = checkpoint.load_checkpoint(self.directory) if self.directory and cfg.resume else None
        step = int(state["step"]) if state else 0
        if self.ctx.env.joins_process_group:
            self._agree_on(step)
        if state is None:
            return 0
        self.step = step
        self._check_matches(state)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng_cpu"])
        scaler = self.ctx.precision.scaler
        if scaler is not None and "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        saved_at = state.get("time")
        self.ctx.metrics.set_checkpoint(step, float(saved_at) if saved_at is not None else None)
        return step

    def _agree_on(self, step: int) -> None:
        agree = torch.tensor([step, -step], dtype=torch.float64, device=self.ctx.device)
        all_reduce_max(agree)
        high, low = int(agree[0].item()), -int(agree[1].item())
        if high != low:
            raise ConfigError(
                f"ranks found different checkpoints in --checkpoint-dir {self.directory} "
                f"(steps {low}..{high}); it must be one volume shared by every rank pod"
            )

    def _check_matches(self, state: dict[str, Any]) -> None:
        if state.get("task") != self.task.name:
            raise ConfigError(
                f"the checkpoint in {self.directory} is for task {state.get('task')!r}, not {self.task.name!r}; "
                f"use a fresh --checkpoint-dir"
            )
        window = self.ctx.settings.plan.window_size
        if state.get("global_batch_size") != window:
            self.ctx.log("warning", message=(
                f"checkpoint was written with global batch {state.get('global_batch_size')}, now "
                f"{window}: the data order after resume differs from an uninterrupted run"
            ))  # fmt: skip

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, reason: str) -> bool:
        """Rank 0 writes the checkpoint; False (on every rank) when it refused to.

        Only one checkpoint is kept, so one written from NaN/Inf weights would replace the last
        good state with one that can never train again. Rank 0 therefore checks every
        floating-point tensor it is about to write (weights, buffers, optimizer moments) and
        writes nothing if one is not finite; the file on disk stays as it was.
        """
        if not self.directory:
            return True
        started = time.perf_counter()
        bad = self._write(model, optimizer, step) if self.ctx.env.rank == 0 else []
        # Everyone waits for the file: otherwise a rank that exits first (preemption) can make the
        # operator tear the gang down while rank 0 is still writing. Costs nothing extra, because
        # the other ranks would wait for rank 0 at the next all-reduce anyway. The same all-reduce
        # tells every rank whether rank 0 refused, so all of them stop together.
        refused = all_reduce_sum(torch.tensor([float(len(bad))], device=self.ctx.device)).item() > 0
        if refused:
            self._refuse(step, reason, bad)
            return False
        duration = time.perf_counter() - started
        self.ctx.metrics.observe_checkpoint(duration)
        self.ctx.metrics.set_checkpoint(step, time.time())
        self.step = step
        self.ctx.log("checkpoint", step=step, reason=reason, seconds=round(duration, 4), dir=self.directory)
        return True

    def _write(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> list[str]:
        """Rank 0: write the state unless a tensor in it is not finite; the names of those that are not."""
        assert self.directory
        state = {
            "step": step,
            "task": self.task.name,
            "seed": self.ctx.cfg.seed,
            "world_size": self.ctx.env.world_size,
            "global_batch_size": self.ctx.settings.plan.window_size,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng_cpu": torch.get_rng_state(),
            "time": time.time(),
        }  # fmt: skip
        scaler = self.ctx.precision.scaler
        if scaler is not None:  # the loss scale decides which fp16 steps are skipped
            state["scaler"] = scaler.state_dict()
        bad = checkpoint.nonfinite_entries({"model": state["model"], "optimizer": state["optimizer"]})
        if not bad:
            checkpoint.save_checkpoint(self.directory, state)
        return bad

    def kept(self) -> str:
        """What is on disk after a non-finite stop, for the error line."""
        if not self.directory:
            return "no --checkpoint-dir is set"
        if self.step is None:
            return f"any checkpoint in {self.directory} is left as it was"
        return f"the checkpoint of step {self.step} in {self.directory} is kept"

    def _refuse(self, step: int, reason: str, bad: list[str]) -> None:
        names = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        where = f"non-finite (NaN/Inf) values in {names}" if bad else "non-finite (NaN/Inf) values on rank 0"
        self.failure = f"refused to write the {reason} checkpoint of step {step}: {where}; {self.kept()}"
        self.ctx.log("checkpoint_refused", level="error", step=step, reason=reason, tensors=bad[:20],
                     message=self.failure)
