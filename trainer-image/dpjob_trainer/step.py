"""One optimizer step: the step's micro-batches forward and backward, the vote, then the update.

Why each rank's loss is multiplied by ``num_real * world_size / window_real``: with DDP's mean
all-reduce this makes the reduced gradient exactly the gradient of the mean loss over every
real sample of the accumulation window, the same number a single device computes for the same
global batch, including an uneven last batch and padding shards (weight 0).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from .agreement import Agreement
from .context import RunContext
from .distributed import CommHook
from .faults import LossFn
from .prefetch import Prefetcher
from .votes import vote


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


@dataclass(frozen=True)
class Training:
    """The objects one run trains: the model, the module that trains it (DDP or itself), the rest."""

    model: torch.nn.Module
    train_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: LossFn
    hook: CommHook | None


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


class Stepper:
    """Takes optimizer steps over this rank's batches."""

    def __init__(self, ctx: RunContext, training: Training, batches: Prefetcher) -> None:
        self.ctx, self.training, self.batches = ctx, training, batches
        self.params = [p for p in training.model.parameters() if p.requires_grad]

    def step(self, step: int, own_seconds: float) -> StepResult:
        """Forward/backward over the step's micro-batches with reduced gradients, then update
        unless the vote says to skip (the gradients are dropped, parameters and optimizer state
        stay as they were). ``own_seconds``: this rank's own time of its previous step."""
        ctx, optimizer = self.ctx, self.training.optimizer
        window_real = ctx.settings.plan.window_real(step)
        result = StepResult(loss_sum=torch.zeros((), device=ctx.device), window_real=window_real)
        for j in range(ctx.cfg.grad_accum):
            self._micro_batch(step, j, result)
        ctx.precision.unscale(optimizer)
        result.grad_norm = _grad_norm(self.params, ctx.cfg.clip_grad_norm)
        result.agreed, result.ready_at = vote(ctx, result.loss_sum, result.grad_norm, own_seconds)
        if result.outcome.apply_update:
            optimizer.step()
        ctx.precision.update()
        optimizer.zero_grad(set_to_none=True)
        return result

    def _micro_batch(self, step: int, j: int, result: StepResult) -> None:
        ctx, t = self.ctx, self.training
        accum = ctx.cfg.grad_accum
        (inputs, targets), waited = self.batches.take()
        result.data_wait += waited
        mb = ctx.settings.plan.micro_batch(step * accum + j)
        result.epoch = mb.epoch
        # See the module docstring: makes the reduced gradient the exact global mean.
        weight = mb.num_real * ctx.env.world_size / result.window_real
        last = j == accum - 1
        sync = contextlib.nullcontext() if last or t.hook is None else t.train_model.no_sync()  # type: ignore[operator]
        with sync:
            with ctx.precision.autocast():
                loss = t.loss_fn(t.train_model(inputs), targets)
            if t.hook is not None and last:
                t.hook.start_backward()
            ctx.precision.scale(loss * weight).backward()
            self.batches.prefetch()  # before the step's wait: the GPU is not idle while we fetch
            if t.hook is not None and last:
                result.comm_token = t.hook.end_backward()
        result.loss_sum += loss.detach().float() * weight
        result.local_samples += mb.num_real
