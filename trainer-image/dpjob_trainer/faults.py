"""Faults injected for tests, through hooks the loop calls around each step; pure (no torch).

The hidden flags ``--slow-rank``/``--slow-seconds`` (a straggler), ``--inject-nan-at-step``/
``--inject-nan-steps`` (a NaN loss on one rank) and ``--hang-after-step`` (a stuck gang) let the
tests produce what a real cluster produces rarely. The loop knows only ``StepHooks``; a run
without those flags gets ``NoFaults``, whose hooks do nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from .config import TrainConfig
from .env import DistEnv
from .stop_flag import StopFlag

LossFn = Callable[[Any, Any], Any]
Log = Callable[..., None]


class StepHooks(Protocol):
    """What the loop calls around one optimizer step (``step`` counts from 0 before the step)."""

    def wrap_loss(self, loss_fn: LossFn) -> LossFn:
        """The loss function the steps use, called once before the first step."""
        ...

    def before_step(self, step: int) -> None:
        """At the start of the step, inside its timing."""
        ...

    def after_step(self, step: int) -> bool:
        """After step ``step`` (1-based now) was logged; True ends the run as preempted."""
        ...


class NoFaults:
    """The hooks of a real run: nothing happens."""

    def wrap_loss(self, loss_fn: LossFn) -> LossFn:
        return loss_fn

    def before_step(self, step: int) -> None:
        pass

    def after_step(self, step: int) -> bool:
        return False


class FlagFaults:
    """The faults the hidden flags ask for (see the module docstring and __main__.py)."""

    def __init__(self, cfg: TrainConfig, env: DistEnv, stop: StopFlag, log: Log) -> None:
        self.cfg, self.env, self.stop, self.log = cfg, env, stop, log
        self.poison_next_loss = False  # the step's first micro-batch gets a NaN loss

    def wrap_loss(self, loss_fn: LossFn) -> LossFn:
        def loss(outputs: Any, targets: Any) -> Any:
            value = loss_fn(outputs, targets)
            if self.poison_next_loss:
                self.poison_next_loss = False
                value = value + float("nan")  # NaN loss, finite gradient: only agreement catches it
            return value

        return loss

    def before_step(self, step: int) -> None:
        if self.env.rank == self.cfg.slow_rank and self.cfg.slow_seconds > 0 and self.env.restart_count == 0:
            time.sleep(self.cfg.slow_seconds)  # --slow-rank: a rank that holds the first gang back
        self.poison_next_loss = self._nan_step(step)

    def _nan_step(self, step: int) -> bool:
        """``--inject-nan-at-step K``: a NaN loss in steps K .. K+N-1 (1-based, like the logs; N =
        ``--inject-nan-steps``) on one rank only, rank 1 when there are several, so the tests
        prove that the other ranks take the same decision."""
        first, count = self.cfg.inject_nan_at_step, self.cfg.inject_nan_steps
        victim = 1 if self.env.world_size > 1 else 0
        return first > 0 and self.env.rank == victim and first <= step + 1 < first + count

    def after_step(self, step: int) -> bool:
        """``--hang-after-step``: what a stuck collective looks like from outside (no more steps,
        the metrics endpoint still answers), for testing the operator's stall watchdog. Only the
        first gang (DPJOB_RESTART_COUNT 0) hangs, so a restarted gang resumes and finishes. SIGTERM
        ends the hang like a preemption, without a checkpoint: a real hang could not write one."""
        if step != self.cfg.hang_after_step or self.env.restart_count != 0:
            return False
        self.log("hang", step=step, message="--hang-after-step: blocking until SIGTERM")
        while not self.stop.requested:
            time.sleep(0.2)
        return True


def step_hooks(cfg: TrainConfig, env: DistEnv, stop: StopFlag, log: Log) -> StepHooks:
    """``FlagFaults`` when a hidden fault flag is set, else ``NoFaults``."""
    if cfg.hang_after_step or cfg.inject_nan_at_step > 0 or cfg.slow_rank >= 0:
        return FlagFaults(cfg, env, stop, log)
    return NoFaults()
