"""The training loop: data-parallel SGD that provably equals single-device training.

This module owns the order of events in one run: device and process group, task, resume,
DDP wrap, the step loop (micro-batches, weighted loss, reduced gradients, agreement on loss,
stop vote and finiteness, update or skip), checkpoints (never from non-finite weights), the
report and the JSON log lines. Argument parsing lives in __main__.py, the pure rules in env.py,
sharding.py and nonfinite.py.

Why each rank's loss is multiplied by ``num_real * world_size / window_real``: with DDP's mean
all-reduce this makes the reduced gradient exactly the gradient of the mean loss over every
real sample of the accumulation window, the same number a single device computes for the same
global batch, including an uneven last batch and padding shards (weight 0).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import signal
import sys
import time
from collections.abc import Sized
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, default_collate

from . import checkpoint
from .agreement import GRAD_NONFINITE, LOSS, LOSS_NONFINITE, REDUCED_SLOTS, STOP, Agreement, read_agreement
from .batched import BatchedTensorDataset
from .distributed import CommHook, all_reduce_max, all_reduce_sum, init_process_group, shutdown_process_group
from .env import DistEnv, device_for, select_backend
from .events import emit, write_report
from .metrics import NullMetrics
from .nonfinite import EXIT_NONFINITE, NonfinitePolicy
from .precision import requested_precision, setup_precision
from .prefetch import Prefetcher
from .sharding import ShardPlan
from .stragglers import DEFAULT_FACTOR, StepTimes, StragglerDetector
from .tasks import Task, build_task, load_entrypoint

EXIT_OK = 0
EXIT_USAGE = 2  # configuration, environment, rendezvous or rank-table problem: fix and rerun
EXIT_PREEMPTED = 143  # 128 + SIGTERM: checkpointed and stopped; a retryable failure for the operator
# EXIT_NONFINITE (3, nonfinite.py): a NaN/Inf loss, gradient or weight stopped the run; no checkpoint
# was written from it. Permanent under restartPolicy ExitCode.


class ConfigError(ValueError):
    """A flag combination or checkpoint that cannot work; reported with exit code 2."""


@dataclass
class TrainConfig:
    """Everything the loop needs from the command line. None means "the task's default"."""

    task: str = "mlp"
    entrypoint: str | None = None
    steps: int | None = None
    epochs: float | None = None
    batch_size: int | None = None
    lr: float | None = None
    momentum: float = 0.0
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    seed: int = 0
    grad_reduction: str = "mean"
    grad_accum: int = 1
    clip_grad_norm: float = 0.0
    amp: bool = False  # the older name of precision bf16
    precision: str = "fp32"  # fp32, bf16 or fp16 (precision.py)
    tail: str = "keep"
    shuffle: bool | None = None
    dataset_size: int | None = None
    model_width: int | None = None  # --task transformer: the model's width (its default 256)
    num_workers: int = 0
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = True
    log_every: int = 10
    report_dir: str | None = None
    rendezvous_timeout: float = 900.0
    collective_timeout: float = 1800.0
    shutdown_timeout: float = 30.0
    hang_after_step: int = 0  # test hook (hidden flag): block after this step in the first gang
    nonfinite: str = "stop"  # NaN/Inf loss or gradient: stop (exit 3) or skip the update
    max_nonfinite_steps: int = 3  # --nonfinite skip: more consecutive non-finite steps than this stop
    inject_nan_at_step: int = 0  # test hook (hidden flag): NaN loss from this step on one rank
    inject_nan_steps: int = 1  # test hook (hidden flag): for this many consecutive steps
    straggler_factor: float = DEFAULT_FACTOR  # a rank this much slower than the median is a straggler
    slow_rank: int = -1  # test hook (hidden flag): this rank sleeps --slow-seconds in every step
    slow_seconds: float = 0.0


@dataclass
class StepResult:
    """What one optimizer step produced on this rank (tensors stay on the device until logged)."""

    loss_sum: torch.Tensor
    window_real: int
    local_samples: int = 0
    data_wait: float = 0.0
    comm_token: Any = None
    epoch: int = 0
    grad_norm: torch.Tensor | None = None
    agreed: Agreement | None = None  # the step's all-reduce, identical on every rank (agreement.py)
    ready_at: float = 0.0  # perf_counter when this rank reached the step's all-reduce (its own work done)

    @property
    def outcome(self) -> Agreement:
        assert self.agreed is not None, "read only after the step's all-reduce"
        return self.agreed


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


def _float32_bytes(tensor: torch.Tensor) -> bytes:
    """The values as float32 bytes, read straight from memory: the same bytes as numpy's
    ``tobytes()`` without needing numpy, at memcpy speed (``bytes()`` of a storage goes element by
    element, minutes for a model of tens of millions of parameters)."""
    flat = tensor.detach().to("cpu", torch.float32).contiguous().clone()  # owned by us while read
    if flat.numel() == 0:
        return b""
    return ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())


def param_sha256(model: torch.nn.Module) -> str:
    """sha256 over all parameters as float32 bytes in ``parameters()`` order: equal iff identical."""
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(_float32_bytes(p))
    return digest.hexdigest()


class StopFlag:
    """Set by SIGTERM; acted on only at a step boundary so every rank stops at the same step."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True


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


def _identity(batch: Any) -> Any:
    return batch


class _ShardBatchSampler:
    """Feeds DataLoader this rank's micro-batches from ``start`` on, forever (the loop stops it)."""

    def __init__(self, plan: ShardPlan, start: int) -> None:
        self.plan, self.start = plan, start

    def __iter__(self) -> Any:
        m = self.start
        while True:
            yield list(self.plan.micro_batch(m).indices)
            m += 1


def _grad_norm(params: list[torch.nn.Parameter], clip: float) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if clip > 0:
        clipped: torch.Tensor = torch.nn.utils.clip_grad_norm_(params, clip)
        return clipped
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)
    if get_total_norm is not None:  # torch >= 2.6: norm without touching the gradients
        total: torch.Tensor = get_total_norm(grads)
        return total
    norm: torch.Tensor = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    return norm


class Trainer:
    """One rank's run. ``run()`` returns the process exit code."""

    def __init__(self, cfg: TrainConfig, env: DistEnv, metrics: NullMetrics, stop: StopFlag, out: TextIO = sys.stdout):
        self.cfg, self.env, self.metrics, self.stop, self.out = cfg, env, metrics, stop, out
        self.exit_hard = False  # the process group would not shut down: skip interpreter teardown
        self.failure: str | None = None  # why the run stopped with EXIT_NONFINITE, for the stderr line
        self.checkpoint_step: int | None = None  # step of the checkpoint on disk, when known
        self.policy = NonfinitePolicy(cfg.nonfinite, cfg.max_nonfinite_steps)
        # --straggler-factor 0: no detection (the own times still travel, so every rank's all-reduce
        # has the same length whatever its flag)
        self.stragglers = StragglerDetector(cfg.straggler_factor) if cfg.straggler_factor else None
        self.own_seconds = 0.0  # this rank's own time of its last step (wall minus waiting for the others)
        self.straggler: int | None = None  # rank 0: the straggler last reported

    def log(self, event: str, **fields: Any) -> None:
        emit(event, self.out, rank=self.env.rank, **fields)

    # ---- setup -------------------------------------------------------------------------------
    def _setup_device(self) -> None:
        env = self.env
        self.backend = select_backend(
            env.requested_backend, cuda_available=torch.cuda.is_available(), npu_available=_npu_available()
        )
        self.device = torch.device(device_for(self.backend, env.local_rank, device_count=_device_count(self.backend)))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        elif self.device.type == "npu":
            torch.npu.set_device(self.device)  # type: ignore[attr-defined]
        if env.joins_process_group:
            init_process_group(env, self.backend, str(self.device), rendezvous_timeout=self.cfg.rendezvous_timeout,
                               collective_timeout=self.cfg.collective_timeout)

    def _build_task(self) -> Task:
        cfg = self.cfg
        if cfg.entrypoint:
            return load_entrypoint(cfg.entrypoint, seed=cfg.seed)
        return build_task(cfg.task, seed=cfg.seed, dataset_size=cfg.dataset_size, world_size=self.env.world_size,
                          model_width=cfg.model_width)

    def _resolve(self, task: Task) -> None:
        cfg, d = self.cfg, task.defaults
        self.batch_size = cfg.batch_size or d.get("batch_size", 32)
        self.lr = cfg.lr if cfg.lr is not None else d.get("lr", 0.01)
        self.shuffle = cfg.shuffle if cfg.shuffle is not None else d.get("shuffle", True)
        if cfg.grad_accum < 1:
            raise ConfigError(f"--grad-accum must be >= 1, got {cfg.grad_accum}")
        if cfg.tail not in ("keep", "drop"):
            raise ConfigError(f"--tail must be keep or drop, got {cfg.tail!r}")
        try:
            self.policy.validate()
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if not isinstance(task.dataset, Sized):  # load_entrypoint checked it; this tells mypy too
            raise ConfigError(f"task {task.name}: the dataset must be map-style (__len__ and __getitem__)")
        try:
            self.plan = ShardPlan(
                len(task.dataset), self.env.world_size, self.env.rank, self.batch_size, accum=cfg.grad_accum,
                seed=cfg.seed, shuffle=self.shuffle, drop_tail=cfg.tail == "drop",
            )  # fmt: skip
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if cfg.epochs is not None:
            self.total_steps = math.ceil(cfg.epochs * self.plan.steps_per_epoch)
        else:
            self.total_steps = cfg.steps if cfg.steps is not None else d.get("steps", 100)
        if self.total_steps < 0:
            raise ConfigError(f"--steps must be >= 0, got {self.total_steps}")

    def _setup_precision(self) -> None:
        try:
            self.precision, warning = setup_precision(requested_precision(self.cfg.precision, self.cfg.amp),
                                                      self.device)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if warning:
            self.log("warning", message=f"--precision: {warning}")

    def _make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        cfg = self.cfg
        if cfg.optimizer == "sgd":
            return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        if cfg.optimizer == "adamw":
            return torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=cfg.weight_decay)
        raise ConfigError(f"--optimizer must be sgd or adamw, got {cfg.optimizer!r}")

    def _loader(self, dataset: Any, start_micro_batch: int) -> Any:
        # A second plan instance: DataLoader may prefetch across an epoch boundary while the loop
        # still needs the previous epoch's order.
        sampler_plan = ShardPlan(
            self.plan.dataset_size, self.plan.num_shards, self.plan.shard_id, self.plan.batch_size,
            accum=self.plan.accum, seed=self.plan.seed, shuffle=self.plan.shuffle, drop_tail=self.plan.drop_tail,
        )  # fmt: skip
        collate = _identity if isinstance(dataset, BatchedTensorDataset) else default_collate
        loader = DataLoader(
            dataset,
            batch_sampler=_ShardBatchSampler(sampler_plan, start_micro_batch),
            collate_fn=collate,
            num_workers=self.cfg.num_workers,
            pin_memory=self.device.type == "cuda",
        )
        return iter(loader)

    # ---- checkpoints -------------------------------------------------------------------------
    def _resume(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, task: Task) -> int:
        cfg = self.cfg
        state = checkpoint.load_checkpoint(cfg.checkpoint_dir) if cfg.checkpoint_dir and cfg.resume else None
        step = int(state["step"]) if state else 0
        if self.env.joins_process_group:
            agree = torch.tensor([step, -step], dtype=torch.float64, device=self.device)
            all_reduce_max(agree)
            high, low = int(agree[0].item()), -int(agree[1].item())
            if high != low:
                raise ConfigError(
                    f"ranks found different checkpoints in --checkpoint-dir {cfg.checkpoint_dir} "
                    f"(steps {low}..{high}); it must be one volume shared by every rank pod"
                )
        if state is None:
            return 0
        self.checkpoint_step = step
        if state.get("task") != task.name:
            raise ConfigError(
                f"the checkpoint in {cfg.checkpoint_dir} is for task {state.get('task')!r}, not {task.name!r}; "
                f"use a fresh --checkpoint-dir"
            )
        if state.get("global_batch_size") != self.plan.window_size:
            self.log("warning", message=(
                f"checkpoint was written with global batch {state.get('global_batch_size')}, now "
                f"{self.plan.window_size}: the data order after resume differs from an uninterrupted run"
            ))  # fmt: skip
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng_cpu"])
        if self.precision.scaler is not None and "scaler" in state:
            self.precision.scaler.load_state_dict(state["scaler"])
        saved_at = state.get("time")
        self.metrics.set_checkpoint(step, float(saved_at) if saved_at is not None else None)
        return step

    def _save(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, task: Task, step: int, reason: str
    ) -> bool:
        """Rank 0 writes the checkpoint; False (on every rank) when it refused to.

        Only one checkpoint is kept, so one written from NaN/Inf weights would replace the last
        good state with one that can never train again. Rank 0 therefore checks every
        floating-point tensor it is about to write (weights, buffers, optimizer moments) and
        writes nothing if one is not finite; the file on disk stays as it was.
        """
        if not self.cfg.checkpoint_dir:
            return True
        started = time.perf_counter()
        bad: list[str] = []
        if self.env.rank == 0:
            state = {
                "step": step,
                "task": task.name,
                "seed": self.cfg.seed,
                "world_size": self.env.world_size,
                "global_batch_size": self.plan.window_size,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng_cpu": torch.get_rng_state(),
                "time": time.time(),
            }  # fmt: skip
            if self.precision.scaler is not None:  # the loss scale decides which fp16 steps are skipped
                state["scaler"] = self.precision.scaler.state_dict()
            bad = checkpoint.nonfinite_entries({"model": state["model"], "optimizer": state["optimizer"]})
            if not bad:
                checkpoint.save_checkpoint(self.cfg.checkpoint_dir, state)
        # Everyone waits for the file: otherwise a rank that exits first (preemption) can make the
        # operator tear the gang down while rank 0 is still writing. Costs nothing extra, because
        # the other ranks would wait for rank 0 at the next all-reduce anyway. The same all-reduce
        # tells every rank whether rank 0 refused, so all of them stop together.
        refused = all_reduce_sum(torch.tensor([float(len(bad))], device=self.device)).item() > 0
        if refused:
            self._refuse_checkpoint(step, reason, bad)
            return False
        duration = time.perf_counter() - started
        self.metrics.observe_checkpoint(duration)
        self.metrics.set_checkpoint(step, time.time())
        self.checkpoint_step = step
        self.log("checkpoint", step=step, reason=reason, seconds=round(duration, 4), dir=self.cfg.checkpoint_dir)
        return True

    def _report_straggler(self, step: int, times: StepTimes) -> None:
        """Rank 0: export the step times; log a straggler when one appears or changes."""
        self.metrics.set_step_times(times)
        if times.straggler is not None and times.straggler != self.straggler:
            self.log("straggler", level="warning", step=step, slow_rank=times.straggler,
                     ratio=round(times.ratio, 2), own_seconds=round(times.slowest_seconds, 6),
                     median_seconds=round(times.median_seconds, 6))
        self.straggler = times.straggler

    def _kept_checkpoint(self) -> str:
        """What is on disk after a non-finite stop, for the error line."""
        if not self.cfg.checkpoint_dir:
            return "no --checkpoint-dir is set"
        if self.checkpoint_step is None:
            return f"any checkpoint in {self.cfg.checkpoint_dir} is left as it was"
        return f"the checkpoint of step {self.checkpoint_step} in {self.cfg.checkpoint_dir} is kept"

    def _refuse_checkpoint(self, step: int, reason: str, bad: list[str]) -> None:
        names = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        where = f"non-finite (NaN/Inf) values in {names}" if bad else "non-finite (NaN/Inf) values on rank 0"
        self.failure = (f"refused to write the {reason} checkpoint of step {step}: {where}; "
                        f"{self._kept_checkpoint()}")
        self.log("checkpoint_refused", level="error", step=step, reason=reason, tensors=bad[:20],
                 message=self.failure)

    # ---- one optimizer step --------------------------------------------------------------------
    def _step(
        self, train_model: torch.nn.Module, task: Task, hook: CommHook | None, batches: Prefetcher, step: int,
        params: list[Any],
    ) -> StepResult:
        """Forward/backward over the step's micro-batches with reduced gradients, then update."""
        accum, world = self.cfg.grad_accum, self.env.world_size
        window_real = self.plan.window_real(step)
        result = StepResult(loss_sum=torch.zeros((), device=self.device), window_real=window_real)
        if self.env.rank == self.cfg.slow_rank and self.cfg.slow_seconds > 0:
            time.sleep(self.cfg.slow_seconds)  # the --slow-rank test hook: a rank that holds the gang back
        for j in range(accum):
            (inputs, targets), waited = batches.take()
            result.data_wait += waited
            mb = self.plan.micro_batch(step * accum + j)
            result.epoch = mb.epoch
            # See the module docstring: makes the reduced gradient the exact global mean.
            weight = mb.num_real * world / window_real
            last = j == accum - 1
            sync = contextlib.nullcontext() if last or hook is None else train_model.no_sync()  # type: ignore[operator]
            with sync:
                with self.precision.autocast():
                    loss = task.loss_fn(train_model(inputs), targets)
                if j == 0 and self._inject_nan(step):
                    loss = loss + float("nan")  # NaN loss, finite gradient: only agreement catches it
                if hook is not None and last:
                    hook.start_backward()
                self.precision.scale(loss * weight).backward()
                batches.prefetch()  # before the step's wait: the GPU is not idle while we fetch
                if hook is not None and last:
                    result.comm_token = hook.end_backward()
            result.loss_sum += loss.detach().float() * weight
            result.local_samples += mb.num_real
        self.precision.unscale(self.optimizer)
        result.grad_norm = _grad_norm(params, self.cfg.clip_grad_norm)
        self._agree(result)
        if result.outcome.apply_update:
            self.optimizer.step()
        # Skipped: the gradients are dropped, so parameters and optimizer state stay as they were.
        self.precision.update()
        self.optimizer.zero_grad(set_to_none=True)
        return result

    def _agree(self, r: StepResult) -> None:
        """The step's one small all-reduce, done before the update (agreement.py): loss, SIGTERM
        vote, non-finite flags and own step times. Built on the device without host copies; its
        ``.tolist()`` is the step's one host synchronisation, and only the update waits for it."""
        assert r.grad_norm is not None
        world = self.env.world_size
        own_slots = world if world > 1 else 0  # also with detection off: every rank's vector has one length
        votes = torch.zeros(REDUCED_SLOTS + own_slots, dtype=r.loss_sum.dtype, device=self.device)
        grad_norm = r.grad_norm.to(self.device, votes.dtype)
        votes[LOSS] = r.loss_sum
        votes[STOP] = float(self.stop.requested)  # a scalar fill: no host-to-device copy
        votes[LOSS_NONFINITE] = (~torch.isfinite(r.loss_sum)).to(votes.dtype)
        votes[GRAD_NONFINITE] = (~torch.isfinite(grad_norm)).to(votes.dtype)
        if own_slots:  # one slot per rank, only ours non-zero: the sum is every rank's own time
            votes[REDUCED_SLOTS + self.env.rank] = self.own_seconds
        r.ready_at = time.perf_counter()
        all_reduce_sum(votes)
        unreduced = torch.stack([grad_norm, self.precision.scale_tensor().to(votes.dtype)])
        r.agreed = read_agreement(torch.cat([votes, unreduced]).tolist(), world, own_slots,
                                  loss_scaling=self.precision.scaler is not None)

    def _inject_nan(self, step: int) -> bool:
        """``--inject-nan-at-step K`` (test hook): a NaN loss in steps K .. K+N-1 (1-based, like the
        logs; N = ``--inject-nan-steps``) on one rank only, rank 1 when there are several, so the
        tests prove that the other ranks take the same decision."""
        first, count = self.cfg.inject_nan_at_step, self.cfg.inject_nan_steps
        victim = 1 if self.env.world_size > 1 else 0
        return first > 0 and self.env.rank == victim and first <= step + 1 < first + count

    def _loop(
        self, train_model: torch.nn.Module, model: torch.nn.Module, optimizer: torch.optim.Optimizer, task: Task,
        hook: CommHook | None, batches: Prefetcher, start_step: int,
    ) -> tuple[int, int, RunStats]:
        """Steps until done, until any rank got SIGTERM or until a non-finite step stops the run;
        returns (step reached, exit code, stats)."""
        cfg = self.cfg
        params = [p for p in model.parameters() if p.requires_grad]
        stats = RunStats()
        interval_start, interval_samples = time.perf_counter(), 0
        step = start_step
        loop_started = time.perf_counter()
        while step < self.total_steps:
            started = time.perf_counter()
            r = self._step(train_model, task, hook, batches, step, params)
            agreed = r.outcome
            loss, stop_votes, grad_norm = agreed.loss, agreed.stop_votes, agreed.grad_norm
            verdict = self.policy.decide(agreed.nonfinite_ranks > 0)
            if verdict == "stop":  # before any checkpoint: the last one on disk stays the last good one
                stats.train_seconds = time.perf_counter() - loop_started
                self._nonfinite_stop(step + 1, r)
                return step, EXIT_NONFINITE, stats
            step += 1  # a skipped step counts: it consumed its batch (docs/trainer.md)
            if verdict == "skip":
                self._nonfinite_skip(step, r)
            stats.scaler_skipped += agreed.scaler_skip
            stats.record(loss, r.local_samples, r.window_real)
            interval_samples += r.window_real
            now = time.perf_counter()
            lr = optimizer.param_groups[0]["lr"]
            exposed = CommHook.exposed_seconds(r.comm_token)
            self.own_seconds = max(r.ready_at - started - exposed, 1e-9)
            if self.env.rank == 0 and self.stragglers is not None \
                    and (times := self.stragglers.observe(agreed.own_seconds)) is not None:
                self._report_straggler(step, times)
            self.metrics.observe_step(
                duration=now - started, samples=r.local_samples, data_wait=r.data_wait,
                comm_exposed=exposed, loss=loss, learning_rate=lr,
                grad_norm=grad_norm, epoch=r.epoch, timestamp=time.time(), step=step, global_samples=r.window_real,
            )  # fmt: skip
            if cfg.log_every > 0 and (step % cfg.log_every == 0 or step == self.total_steps):
                self.log(
                    "step", step=step, epoch=r.epoch, loss=loss, lr=lr, grad_norm=grad_norm,
                    samples_per_second=round(interval_samples / max(now - interval_start, 1e-9), 2),
                    step_seconds=round(now - started, 6),
                )  # fmt: skip
                interval_start, interval_samples = now, 0
            if step == cfg.hang_after_step and self.env.restart_count == 0:
                return self._hang(step, stats, loop_started)
            if stop_votes > 0 and step < self.total_steps:  # on the last step, just finish normally
                stats.train_seconds = time.perf_counter() - loop_started
                saved = self._save(model, optimizer, task, step, reason="sigterm")
                return step, EXIT_PREEMPTED if saved else EXIT_NONFINITE, stats
            if cfg.checkpoint_every > 0 and step % cfg.checkpoint_every == 0 and step < self.total_steps \
                    and not self._save(model, optimizer, task, step, reason="periodic"):
                stats.train_seconds = time.perf_counter() - loop_started
                return step, EXIT_NONFINITE, stats
        stats.train_seconds = time.perf_counter() - loop_started
        return step, EXIT_OK, stats

    def _nonfinite_skip(self, step: int, r: StepResult) -> None:
        """``--nonfinite skip``: the update of ``step`` was not applied; say so and count it."""
        self.metrics.observe_nonfinite_step()
        a = r.outcome
        self.log("nonfinite_step", level="warning", step=step, loss=a.loss, grad_norm=a.grad_norm,
                 nonfinite_ranks=a.nonfinite_ranks, consecutive=self.policy.consecutive,
                 max_consecutive=self.policy.max_consecutive, action="skipped")

    def _nonfinite_stop(self, step: int, r: StepResult) -> None:
        """The run stops at ``step`` without applying it: one error event and the stderr line."""
        a = r.outcome
        self.failure = (
            f"non-finite loss or gradient at step {step} (loss {a.loss:g}, gradient norm {a.grad_norm:g}, "
            f"NaN/Inf on {a.nonfinite_ranks} of {self.env.world_size} rank(s)); stopped by "
            f"{self.policy.stop_reason()} without applying the update or writing a checkpoint; "
            f"{self._kept_checkpoint()}"
        )  # fmt: skip
        self.log("nonfinite_stop", level="error", step=step, loss=a.loss, grad_norm=a.grad_norm,
                 nonfinite_ranks=a.nonfinite_ranks, consecutive=self.policy.consecutive,
                 skipped_steps=self.policy.skipped, exit_code=EXIT_NONFINITE, message=self.failure)

    def _hang(self, step: int, stats: RunStats, loop_started: float) -> tuple[int, int, RunStats]:
        """``--hang-after-step``: what a stuck collective looks like from outside (no more steps, the
        metrics endpoint still answers), for testing the operator's stall watchdog. Only the first
        gang (DPJOB_RESTART_COUNT 0) hangs, so a restarted gang resumes and finishes. SIGTERM ends
        the hang like a preemption, without a checkpoint: a real hang could not write one either."""
        self.log("hang", step=step, message="--hang-after-step: blocking until SIGTERM")
        while not self.stop.requested:
            time.sleep(0.2)
        stats.train_seconds = time.perf_counter() - loop_started
        return step, EXIT_PREEMPTED, stats

    def _report(
        self, model: torch.nn.Module, task: Task, step: int, start_step: int, code: int,
        stats: RunStats,
    ) -> dict[str, Any]:
        """The per-rank report; written to ``--report`` when given."""
        cfg, env = self.cfg, self.env
        report = {
            "rank": env.rank, "world_size": env.world_size, "backend": self.backend, "task": task.name,
            "steps": step, "steps_this_run": step - start_step, "resumed_from_step": start_step,
            "samples": stats.samples, "global_samples": stats.global_samples, "train_seconds": stats.train_seconds,
            "initial_loss": stats.initial_loss, "final_loss": stats.final_loss,
            "param_sha256": param_sha256(model), "grad_reduction": cfg.grad_reduction, "grad_accum": cfg.grad_accum,
            "batch_size": self.batch_size, "lr": self.lr, "precision": self.precision.name,
            "amp": self.precision.name != "fp32", "scaler_skipped_steps": stats.scaler_skipped,
            "preempted": code == EXIT_PREEMPTED, "exit_code": code, "skipped_steps": self.policy.skipped,
            "config": asdict(cfg),
        }  # fmt: skip
        if task.name == "linear":
            report["weights"] = [float(v) for v in model.get_parameter("w").detach().cpu().flatten()]
        if cfg.report_dir:
            write_report(cfg.report_dir, env.rank, report)
        return report

    # ---- the run -----------------------------------------------------------------------------
    def run(self) -> int:
        cfg, env = self.cfg, self.env
        self._setup_device()
        task = self._build_task()
        self._resolve(task)
        self._setup_precision()
        model = task.model.to(self.device)
        optimizer = self.optimizer = self._make_optimizer(model)
        start_step = self._resume(model, optimizer, task)

        hook: CommHook | None = None
        train_model: torch.nn.Module = model
        if env.joins_process_group:
            # DDP broadcasts rank 0's parameters here: the second guarantee (after the shared seed)
            # that every rank starts identical.
            device_ids = [self.device.index] if self.device.type in ("cuda", "npu") else None
            train_model = DistributedDataParallel(model, device_ids=device_ids)
            hook = CommHook(reduction=cfg.grad_reduction, world_size=env.world_size, device=self.device)
            train_model.register_comm_hook(None, hook.allreduce)
        elif cfg.grad_reduction not in ("mean", "sum"):
            raise ConfigError(f"--grad-reduction must be mean or sum, got {cfg.grad_reduction!r}")

        self.metrics.set_info(
            world_size=str(env.world_size), backend=self.backend, torch_version=torch.__version__,
            task=task.name, rank=str(env.rank), job_name=env.job_name, restart=str(env.restart_count),
        )  # fmt: skip
        self.metrics.set_total_steps(self.total_steps)
        self.log(
            "start", world_size=env.world_size, local_rank=env.local_rank, backend=self.backend,
            device=str(self.device), task=task.name, job=env.job_name, restart_count=env.restart_count,
            start_step=start_step,
            total_steps=self.total_steps, batch_size=self.batch_size, global_batch_size=self.plan.window_size,
            grad_accum=cfg.grad_accum, grad_reduction=cfg.grad_reduction, lr=self.lr, precision=self.precision.name,
            amp=self.precision.name != "fp32", tail=cfg.tail,
            dataset_size=self.plan.dataset_size, steps_per_epoch=self.plan.steps_per_epoch,
        )  # fmt: skip

        batches = Prefetcher(self._loader(task.dataset, start_step * cfg.grad_accum), self.device)
        self.stop.install()
        step, code, stats = self._loop(train_model, model, optimizer, task, hook, batches, start_step)
        # The final checkpoint: a pod restarted after success resumes there and exits at once
        # instead of retraining. Refused (non-finite weights): the run did not succeed.
        if code == EXIT_OK and cfg.checkpoint_dir and step > start_step \
                and not self._save(model, optimizer, task, step, reason="final"):
            code = EXIT_NONFINITE
        report = self._report(model, task, step, start_step, code, stats)
        self.log(
            "done", steps=step, final_loss=report["final_loss"], param_sha256=report["param_sha256"],
            preempted=code == EXIT_PREEMPTED, exit_code=code, skipped_steps=self.policy.skipped,
            train_seconds=round(stats.train_seconds, 6),
            samples_per_second=round(stats.global_samples / max(stats.train_seconds, 1e-9), 2),
        )  # fmt: skip
        if dist.is_available() and dist.is_initialized() and not shutdown_process_group(cfg.shutdown_timeout):
            self.log("shutdown_timeout", seconds=cfg.shutdown_timeout,
                     message="destroy_process_group did not return; exiting without it (pytorch#75097)")
            self.exit_hard = True
        return code
