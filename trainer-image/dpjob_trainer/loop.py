"""The step loop: steps until done, until any rank got SIGTERM, or until a non-finite step stops.

Each step is followed by what every rank agreed on (votes.py): the non-finite policy's verdict,
the metrics and the step log line, the straggler check (rank 0), then the step boundary's
decisions in a fixed order: the fault hooks, the SIGTERM vote, the periodic checkpoint. Every rank
sees the same votes, so every rank leaves the loop at the same step for the same reason.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

from .checkpointer import Checkpointer
from .context import RunContext
from .distributed import CommHook
from .faults import StepHooks
from .nonfinite import EXIT_NONFINITE, NonfinitePolicy
from .step import Stepper, StepResult, Training
from .stragglers import StepTimes, StragglerDetector

# Why the loop ended: the steps are done; SIGTERM (checkpoint, then exit 143); a fault hook ended
# it like a preemption (no checkpoint); a non-finite step or a refused checkpoint (exit 3).
LoopEnd = Literal["finished", "sigterm", "hook", "nonfinite"]


@dataclass
class RunStats:
    """Totals of this process's run, for the report and the ``done`` line."""

    initial_loss: float | None = None
    final_loss: float | None = None
    samples: int = 0
    global_samples: int = 0
    train_seconds: float = 0.0
    scaler_skipped: int = 0  # fp16: updates the loss scaler skipped after a gradient overflow

    def record(self, loss: float, samples: int, global_samples: int) -> None:
        if math.isfinite(loss):  # a skipped step's NaN would make the report's loss meaningless
            if self.initial_loss is None:
                self.initial_loss = loss
            self.final_loss = loss
        self.samples += samples
        self.global_samples += global_samples


class Loop:
    """Runs the steps of one rank; ``stats`` and ``failure`` say how it went."""

    def __init__(
        self, ctx: RunContext, training: Training, stepper: Stepper, checkpointer: Checkpointer,
        policy: NonfinitePolicy, faults: StepHooks, stragglers: StragglerDetector | None,
    ) -> None:  # fmt: skip
        self.ctx, self.training, self.stepper, self.checkpointer = ctx, training, stepper, checkpointer
        self.policy, self.faults, self.stragglers = policy, faults, stragglers
        self.stats = RunStats()
        self.failure: str | None = None  # why a non-finite step stopped the run, for the stderr line
        self.own_seconds = 0.0  # this rank's own time of its last step (wall minus waiting for the others)
        self.straggler: int | None = None  # rank 0: the straggler last reported
        self.interval_start, self.interval_samples = 0.0, 0  # since the last step log line

    def run(self, start_step: int) -> tuple[int, LoopEnd]:
        """Returns (step reached, why the loop ended)."""
        started = time.perf_counter()
        self.interval_start = started
        try:
            return self._steps(start_step)
        finally:
            self.stats.train_seconds = time.perf_counter() - started

    def _steps(self, step: int) -> tuple[int, LoopEnd]:
        while step < self.ctx.settings.total_steps:
            started = time.perf_counter()
            self.faults.before_step(step)
            r = self.stepper.step(step, self.own_seconds)
            verdict = self.policy.decide(r.outcome.nonfinite_ranks > 0)
            if verdict == "stop":  # before any checkpoint: the last one on disk stays the last good one
                self._nonfinite_stop(step + 1, r)
                return step, "nonfinite"
            step += 1  # a skipped step counts: it consumed its batch (docs/trainer.md)
            if verdict == "skip":
                self._nonfinite_skip(step, r)
            self._observe(step, r, started)
            end = self._at_boundary(step, r.outcome.stop_votes)
            if end is not None:
                return step, end
        return step, "finished"

    def _at_boundary(self, step: int, stop_votes: float) -> LoopEnd | None:
        """What happens between ``step`` and the next: the fault hooks, SIGTERM, a periodic checkpoint."""
        cfg, total = self.ctx.cfg, self.ctx.settings.total_steps
        if self.faults.after_step(step):
            return "hook"
        if stop_votes > 0 and step < total:  # on the last step, just finish normally
            return "sigterm"
        if cfg.checkpoint_every > 0 and step % cfg.checkpoint_every == 0 and step < total \
                and not self.checkpointer.save(self.training.model, self.training.optimizer, step, "periodic"):
            return "nonfinite"
        return None

    def _observe(self, step: int, r: StepResult, started: float) -> None:
        """Count the step, export its metrics, check for a straggler and log it every --log-every."""
        agreed = r.outcome
        self.stats.scaler_skipped += agreed.scaler_skip
        self.stats.record(agreed.loss, r.local_samples, r.window_real)
        self.interval_samples += r.window_real
        now = time.perf_counter()
        lr = self.training.optimizer.param_groups[0]["lr"]
        exposed = CommHook.exposed_seconds(r.comm_token)
        self.own_seconds = max(r.ready_at - started - exposed, 1e-9)
        if self.ctx.env.rank == 0 and self.stragglers is not None \
                and (times := self.stragglers.observe(agreed.own_seconds)) is not None:
            self._report_straggler(step, times)
        self.ctx.metrics.observe_step(
            duration=now - started, samples=r.local_samples, data_wait=r.data_wait,
            comm_exposed=exposed, loss=agreed.loss, learning_rate=lr,
            grad_norm=agreed.grad_norm, epoch=r.epoch, timestamp=time.time(), step=step, global_samples=r.window_real,
        )  # fmt: skip
        log_every = self.ctx.cfg.log_every
        if log_every > 0 and (step % log_every == 0 or step == self.ctx.settings.total_steps):
            self.ctx.log(
                "step", step=step, epoch=r.epoch, loss=agreed.loss, lr=lr, grad_norm=agreed.grad_norm,
                samples_per_second=round(self.interval_samples / max(now - self.interval_start, 1e-9), 2),
                step_seconds=round(now - started, 6),
            )  # fmt: skip
            self.interval_start, self.interval_samples = now, 0

    def _report_straggler(self, step: int, times: StepTimes) -> None:
        """Rank 0: export the step times; log a straggler when one appears or changes."""
        self.ctx.metrics.set_step_times(times)
        if times.straggler is not None and times.straggler != self.straggler:
            self.ctx.log("straggler", level="warning", step=step, slow_rank=times.straggler,
                         ratio=round(times.ratio, 2), own_seconds=round(times.slowest_seconds, 6),
                         median_seconds=round(times.median_seconds, 6))
        self.straggler = times.straggler

    def _nonfinite_skip(self, step: int, r: StepResult) -> None:
        """``--nonfinite skip``: the update of ``step`` was not applied; say so and count it."""
        self.ctx.metrics.observe_nonfinite_step()
        a = r.outcome
        self.ctx.log("nonfinite_step", level="warning", step=step, loss=a.loss, grad_norm=a.grad_norm,
                     nonfinite_ranks=a.nonfinite_ranks, consecutive=self.policy.consecutive,
                     max_consecutive=self.policy.max_consecutive, action="skipped")

    def _nonfinite_stop(self, step: int, r: StepResult) -> None:
        """The run stops at ``step`` without applying it: one error event and the stderr line."""
        a = r.outcome
        self.failure = (
            f"non-finite loss or gradient at step {step} (loss {a.loss:g}, gradient norm {a.grad_norm:g}, "
            f"NaN/Inf on {a.nonfinite_ranks} of {self.ctx.env.world_size} rank(s)); stopped by "
            f"{self.policy.stop_reason()} without applying the update or writing a checkpoint; "
            f"{self.checkpointer.kept()}"
        )  # fmt: skip
        self.ctx.log("nonfinite_stop", level="error", step=step, loss=a.loss, grad_norm=a.grad_norm,
                     nonfinite_ranks=a.nonfinite_ranks, consecutive=self.policy.consecutive,
                     skipped_steps=self.policy.skipped, exit_code=EXIT_NONFINITE, message=self.failure)
