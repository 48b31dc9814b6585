"""The MindSpore training loop: the data-parallel recipe plus the torch trainer's outputs.

One step is the guide's: ``value_and_grad`` on this rank's batch, ``DistributedGradReducer``
(mean or sum of the gradients over ranks, from the parallel context), SGD. Then one small
all-reduce of (loss, stop vote) gives every rank the mean loss for logs and metrics and the same
decision to stop after a SIGTERM. The report, log lines and metric names are the torch trainer's
(events.py, metrics.py), plus ``param_sha256_steps``: the parameters' hash after every step, which
must be identical on all ranks at every step although each rank trained on different rows.
"""

from __future__ import annotations

import hashlib
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

from ..config import ConfigError
from ..events import emit, write_report
from ..exits import EXIT_OK, EXIT_PREEMPTED
from ..metrics import NullMetrics
from . import ckpt, runtime
from .config import MsConfig, Resolved
from .env import MsEnv
from .sharding import check_shardable, steps_per_epoch
from .tasks import MsTask, build_task

ROWS_REPORTED = 16  # steps whose rows go into the report (the tests compare shards on them)


def param_sha256(params: list[Any]) -> str:
    """sha256 over the parameters as float32 bytes in order: equal iff identical."""
    digest = hashlib.sha256()
    for p in params:
        digest.update(np.ascontiguousarray(p.asnumpy(), dtype=np.float32).tobytes())
    return digest.hexdigest()


@dataclass
class Progress:
    """What this run did, for the report and the ``done`` line."""

    step: int = 0
    start_step: int = 0
    initial_loss: float | None = None
    final_loss: float | None = None
    samples: int = 0
    global_samples: int = 0
    train_seconds: float = 0.0
    hashes: list[str] = field(default_factory=list)
    rows: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class StepResult:
    loss: float          # mean over ranks
    votes: float         # ranks asking to stop
    norm: float          # gradient norm
    rows: list[int]      # the dataset rows of this rank's batch
    data_wait: float     # seconds waiting for the batch
    comm: float          # seconds in collectives (all exposed)


class MsTrainer:
    """One rank's MindSpore run; ``run()`` returns the exit code."""

    def __init__(self, cfg: MsConfig, env: MsEnv, metrics: NullMetrics, out: TextIO = sys.stdout) -> None:
        self.cfg, self.env, self.metrics, self.out = cfg, env, metrics, out
        self.stop_requested = False
        self.rank, self.world = 0, 1

    def log(self, event: str, **fields: Any) -> None:
        emit(event, self.out, rank=self.rank, **fields)

    def _setup(self) -> tuple[MsTask, Resolved]:
        device = runtime.configure_device()
        self.backend = runtime.BACKENDS.get(device, device.lower())
        if self.env.distributed:
            self.rank, self.world = runtime.start_group(self.cfg.grad_reduction == "mean")
        if self.env.mode == "msrun" and self.world != self.env.expected_world:
            raise ConfigError(f"MS_WORKER_NUM is {self.env.expected_world} but the group has {self.world} ranks")
        res = self.cfg.resolve(self.world)
        check_shardable(res.dataset_size, self.world, res.batch_size)
        self.coll = runtime.Collectives(self.world, self.rank)
        return build_task(self.cfg.task, seed=self.cfg.seed, dataset_size=res.dataset_size), res

    def _batches(self, task: MsTask, res: Resolved, start_step: int) -> Any:
        """This rank's batches from ``start_step`` on: (row index, inputs, targets), forever."""
        index = np.arange(len(task.inputs), dtype=np.int64)
        shard = {"num_shards": self.world, "shard_id": self.rank} if self.world > 1 else {}
        data = ds.NumpySlicesDataset((index, task.inputs, task.targets), column_names=["index", "x", "y"],
                                     shuffle=False, **shard)
        data = data.batch(res.batch_size, drop_remainder=True).repeat()
        if start_step:
            data = data.skip(start_step)  # the same rows an uninterrupted run would reach here
        return data.create_tuple_iterator()

    def _resume(self, optimizer: Any, res: Resolved) -> int:
        """Every rank loads the shared checkpoint; the ranks must agree on its step."""
        cfg = self.cfg
        state = ckpt.load(cfg.checkpoint_dir, optimizer, task=cfg.task) if cfg.checkpoint_dir and cfg.resume else None
        step = state[0] if state else 0
        steps = [int(s) for s in self.coll.gather(float(step))]
        if min(steps) != max(steps):
            raise ConfigError(f"ranks found different checkpoints in --checkpoint-dir {cfg.checkpoint_dir} "
                              f"(steps {min(steps)}..{max(steps)}); it must be one volume shared by every rank")
        if state:
            self.metrics.set_checkpoint(step, state[1])
            if state[2] is not None and state[2] != res.batch_size * self.world:
                self.log("warning", message=f"checkpoint was written with global batch {state[2]}, now "
                                            f"{res.batch_size * self.world}: the data order differs after resume")
        return step

    def _save(self, optimizer: Any, res: Resolved, step: int, reason: str) -> None:
        """Rank 0 writes; everyone waits for it (the same reason as train.py's _save)."""
        if not self.cfg.checkpoint_dir:
            return
        started = time.perf_counter()
        if self.rank == 0:
            ckpt.save(self.cfg.checkpoint_dir, optimizer, step=step, task=self.cfg.task,
                      global_batch=res.batch_size * self.world, seed=self.cfg.seed)
        self.coll.sum([0.0])  # barrier
        seconds = time.perf_counter() - started
        self.metrics.observe_checkpoint(seconds)
        self.metrics.set_checkpoint(step, time.time())
        self.log("checkpoint", step=step, reason=reason, seconds=round(seconds, 4), dir=self.cfg.checkpoint_dir)

    def _step(self, grad_fn: Any, reducer: Any, optimizer: Any, batches: Any) -> StepResult:
        """One recipe step. PyNative runs the gradient all-reduce and the loss/vote sum in line with
        the step, so their whole time is exposed communication (nothing overlaps them)."""
        t0 = time.perf_counter()
        rows, x, y = next(batches)
        t1 = time.perf_counter()
        loss, grads = grad_fn(x, y)
        t2 = time.perf_counter()
        if reducer is not None:
            grads = reducer(grads)
        comm = time.perf_counter() - t2
        optimizer(grads)
        norm = float(np.sqrt(sum(float(np.square(g.asnumpy()).sum()) for g in grads)))
        t3 = time.perf_counter()
        loss_sum, votes = self.coll.sum([float(loss.asnumpy()), float(self.stop_requested)])
        comm += time.perf_counter() - t3
        return StepResult(loss_sum / self.world, votes, norm, [int(r) for r in rows.asnumpy()], t1 - t0, comm)

    def _loop(self, task: MsTask, res: Resolved, optimizer: Any, prog: Progress) -> int:
        def forward(x: Any, y: Any) -> Any:
            return task.loss_fn(task.net(x), y)

        grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
        reducer = runtime.grad_reducer(optimizer.parameters, self.world)
        batches = self._batches(task, res, prog.step)
        params = task.net.trainable_params()
        per_epoch = steps_per_epoch(res.dataset_size, self.world, res.batch_size)
        started = time.perf_counter()
        while prog.step < res.steps:
            t0 = time.perf_counter()
            result = self._step(grad_fn, reducer, optimizer, batches)
            loss, votes, rows = result.loss, result.votes, result.rows
            prog.step += 1
            prog.initial_loss = loss if prog.initial_loss is None else prog.initial_loss
            prog.final_loss, prog.samples = loss, prog.samples + res.batch_size
            prog.global_samples += res.batch_size * self.world
            prog.hashes.append(param_sha256(params))
            if len(prog.rows) < ROWS_REPORTED:
                prog.rows.append(rows)
            self._observe(prog.step, result, res, prog.step // per_epoch, time.perf_counter() - t0)
            if votes > 0 and prog.step < res.steps:
                prog.train_seconds = time.perf_counter() - started
                self._save(optimizer, res, prog.step, "sigterm")
                return EXIT_PREEMPTED
            if self.cfg.checkpoint_every and prog.step % self.cfg.checkpoint_every == 0 and prog.step < res.steps:
                self._save(optimizer, res, prog.step, "periodic")
        prog.train_seconds = time.perf_counter() - started
        return EXIT_OK

    def _observe(self, step: int, result: StepResult, res: Resolved, epoch: int, seconds: float) -> None:
        loss, norm = result.loss, result.norm
        self.metrics.observe_step(
            duration=seconds, samples=res.batch_size, data_wait=result.data_wait, comm_exposed=result.comm,
            loss=loss, learning_rate=res.lr, grad_norm=norm, epoch=epoch, timestamp=time.time(), step=step,
            global_samples=res.batch_size * self.world)
        if self.cfg.log_every > 0 and (step % self.cfg.log_every == 0 or step == res.steps):
            self.log("step", step=step, epoch=epoch, loss=loss, lr=res.lr, grad_norm=norm,
                     step_seconds=round(seconds, 6))

    def _report(self, task: MsTask, res: Resolved, prog: Progress, code: int, first_hash: str) -> dict[str, Any]:
        """The torch report's keys where they mean the same, plus the per-step hashes and rows."""
        params = task.net.trainable_params()
        report: dict[str, Any] = {
            "rank": self.rank, "world_size": self.world, "backend": self.backend, "task": task.name,
            "framework": "mindspore", "mindspore_version": ms.__version__,
            "steps": prog.step, "steps_this_run": prog.step - prog.start_step, "resumed_from_step": prog.start_step,
            "samples": prog.samples, "global_samples": prog.global_samples, "train_seconds": prog.train_seconds,
            "initial_loss": prog.initial_loss, "final_loss": prog.final_loss,
            "param_sha256": param_sha256(params), "initial_param_sha256": first_hash,
            "param_sha256_steps": prog.hashes, "step_rows": prog.rows,
            "grad_reduction": self.cfg.grad_reduction, "grad_accum": 1, "batch_size": res.batch_size,
            "lr": res.lr, "amp": False, "precision": "fp32", "preempted": code == EXIT_PREEMPTED,
            "exit_code": code, "skipped_steps": 0, "scaler_skipped_steps": 0, "config": asdict(self.cfg),
            "params": {p.name: [float(v) for v in p.asnumpy().ravel()] for p in params},
        }
        if task.name == "linear":
            report["weights"] = report["params"]["w"]
        if self.cfg.report_dir:
            write_report(self.cfg.report_dir, self.rank, report)
        return report

    def run(self) -> int:
        task, res = self._setup()
        optimizer = nn.SGD(task.net.trainable_params(), learning_rate=res.lr, momentum=self.cfg.momentum,
                           weight_decay=self.cfg.weight_decay)
        prog = Progress()
        prog.step = prog.start_step = self._resume(optimizer, res)
        first_hash = param_sha256(task.net.trainable_params())  # after resume: where this run starts
        self.metrics.set_info(world_size=str(self.world), backend=self.backend, torch_version="", task=task.name,
                              rank=str(self.rank), job_name=self.env.job_name, restart=str(self.env.restart_count))
        self.metrics.set_total_steps(res.steps)
        self.log("start", framework="mindspore", world_size=self.world, local_rank=self.env.local_rank,
                 backend=self.backend, task=task.name, job=self.env.job_name, start_step=prog.start_step,
                 total_steps=res.steps, batch_size=res.batch_size, global_batch_size=res.batch_size * self.world,
                 grad_reduction=self.cfg.grad_reduction, lr=res.lr, dataset_size=res.dataset_size, mode=self.env.mode)
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop_requested", True))
        code = self._loop(task, res, optimizer, prog)
        if code == EXIT_OK and prog.step > prog.start_step:
            self._save(optimizer, res, prog.step, "final")
        report = self._report(task, res, prog, code, first_hash)
        self.log("done", steps=prog.step, final_loss=report["final_loss"], param_sha256=report["param_sha256"],
                 preempted=code == EXIT_PREEMPTED, exit_code=code, train_seconds=round(prog.train_seconds, 6))
        return code
