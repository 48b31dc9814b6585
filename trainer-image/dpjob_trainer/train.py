"""One rank's run, in order: data-parallel SGD that provably equals single-device training.

This module only orders the parts: device and process group (devices.py), task and its settings
(settings.py), resume (checkpointer.py), the DDP wrap, the step loop (loop.py, one step in
step.py, its vote in votes.py), the checkpoint the loop's end asks for, the report and the JSON
log lines (report.py). Argument parsing lives in __main__.py and config.py, the pure rules in
env.py, sharding.py and nonfinite.py, the test-only faults in faults.py.
"""

from __future__ import annotations

import sys
from typing import TextIO

import torch.distributed as dist

from .checkpointer import Checkpointer
from .config import TrainConfig
from .context import Outputs, RunContext
from .data import make_batches
from .devices import setup_device, wrap_for_ddp
from .distributed import destroys_group_at_exit, shutdown_process_group
from .env import DistEnv
from .exits import EXIT_OK, EXIT_PREEMPTED
from .faults import StepHooks, step_hooks
from .handshake import WarmCause
from .loop import Loop, LoopEnd
from .metrics import NullMetrics
from .nonfinite import EXIT_NONFINITE, NonfinitePolicy
from .report import announce_done, announce_start, write_rank_report
from .settings import make_optimizer, resolve_precision, resolve_settings
from .step import Stepper, Training
from .stop_flag import StopFlag
from .stragglers import StragglerDetector
from .tasks import Task, build_task, load_entrypoint
from .warm import record_warm_restarts


class Trainer:
    """One rank's run. ``run()`` returns the process exit code."""

    def __init__(
        self, cfg: TrainConfig, env: DistEnv, metrics: NullMetrics, stop: StopFlag, out: TextIO = sys.stdout,
        faults: StepHooks | None = None,
    ) -> None:  # fmt: skip
        self.cfg, self.env = cfg, env
        self.io = Outputs(env, metrics, stop, out)
        self.exit_hard = False  # skip interpreter teardown: a gloo group, or one that would not shut down
        self.failure: str | None = None  # why the run stopped with EXIT_NONFINITE, for the stderr line
        self.warm_cause: WarmCause | None = None  # rank 0 of a gang restarted warm: who failed first
        self.policy = NonfinitePolicy(cfg.nonfinite, cfg.max_nonfinite_steps)
        # --straggler-factor 0: no detection (the own times still travel, so every rank's all-reduce
        # has the same length whatever its flag)
        self.stragglers = StragglerDetector(cfg.straggler_factor) if cfg.straggler_factor else None
        # The hidden test flags' faults unless the caller brings its own hooks.
        self.faults = faults if faults is not None else step_hooks(cfg, env, stop, self.io.log)

    def _prepare(self) -> tuple[RunContext, Task]:
        """Device and process group, the task, the settings it implies and the precision."""
        cfg = self.cfg
        self.io.metrics.set_warm_restarts(self.env.warm_restart)
        backend, device = setup_device(cfg, self.env, self._warm_cause)
        if cfg.entrypoint:
            task = load_entrypoint(cfg.entrypoint, seed=cfg.seed)
        else:
            task = build_task(cfg.task, seed=cfg.seed, dataset_size=cfg.dataset_size,
                              world_size=self.env.world_size, model_width=cfg.model_width)
        settings = resolve_settings(cfg, self.env, task)
        precision = resolve_precision(cfg, device, self.io.log)
        return RunContext(cfg, self.io, backend, device, settings, precision), task

    def _warm_cause(self, cause: WarmCause) -> None:
        """Rank 0 of a gang restarted warm: who failed first, for the operator's books (warm.py)."""
        self.warm_cause = cause
        self.io.metrics.set_warm_cause(cause)
        self.io.log("warm_restart", generation=self.env.generation, failed_rank=cause.rank,
                    exit_code=cause.exit_code, failed_at=cause.failed_at)

    def run(self) -> int:
        ctx, task = self._prepare()
        cfg = self.cfg
        model = task.model.to(ctx.device)
        optimizer = make_optimizer(cfg, ctx.settings.lr, model)
        checkpointer = Checkpointer(ctx, task)
        start_step = checkpointer.resume(model, optimizer)
        train_model, hook = wrap_for_ddp(model, cfg, self.env, ctx.device)
        training = Training(model, train_model, optimizer, self.faults.wrap_loss(task.loss_fn), hook)
        announce_start(ctx, task, start_step)
        batches = make_batches(task.dataset, ctx.settings.plan, start_step * cfg.grad_accum, cfg.num_workers,
                               ctx.device)
        self.io.stop.install()
        stepper = Stepper(ctx, training, batches)
        loop = Loop(ctx, training, stepper, checkpointer, self.policy, self.faults, self.stragglers)
        step, end = loop.run(start_step)
        code = self._exit_code(end, step, start_step, checkpointer, training)
        self.failure = loop.failure or checkpointer.failure
        report = write_rank_report(ctx, model, task, (step, start_step), code, loop.stats, self.policy.skipped)
        announce_done(ctx, report, loop.stats)
        if code == EXIT_OK and self.warm_cause is not None:
            # The operator reads the metrics every 10 s: a job that ends sooner leaves it here.
            record_warm_restarts(self.env.warm_restart, self.warm_cause, self.io.metrics.first_step_time())
        self._shut_down()
        return code

    def _exit_code(
        self, end: LoopEnd, step: int, start_step: int, checkpointer: Checkpointer, training: Training
    ) -> int:
        """The exit code of the loop's end, after the checkpoint that end asks for."""
        if end == "sigterm":
            saved = checkpointer.save(training.model, training.optimizer, step, reason="sigterm")
            return EXIT_PREEMPTED if saved else EXIT_NONFINITE
        if end == "hook":
            return EXIT_PREEMPTED
        if end == "nonfinite":
            return EXIT_NONFINITE
        # The final checkpoint: a pod restarted after success resumes there and exits at once
        # instead of retraining. Refused (non-finite weights): the run did not succeed.
        if self.cfg.checkpoint_dir and step > start_step \
                and not checkpointer.save(training.model, training.optimizer, step, reason="final"):
            return EXIT_NONFINITE
        return EXIT_OK

    def _shut_down(self) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            return
        if not destroys_group_at_exit(str(dist.get_backend())):
            self.exit_hard = True  # leave without interpreter teardown, which would destroy the group
            return
        timeout = self.cfg.shutdown_timeout
        if not shutdown_process_group(timeout):
            self.io.log("shutdown_timeout", seconds=timeout,
                        message="destroy_process_group did not return; exiting without it (pytorch#75097)")
            self.exit_hard = True
