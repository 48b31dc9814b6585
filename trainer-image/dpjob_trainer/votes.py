"""The step's one small all-reduce, done before the update (agreement.py): loss, SIGTERM vote,
non-finite flags and each rank's own step time. Built on the device without host copies; its
``.tolist()`` is the step's one host synchronisation, and only the update waits for it."""

from __future__ import annotations

import time

import torch

from .agreement import GRAD_NONFINITE, LOSS, LOSS_NONFINITE, REDUCED_SLOTS, STOP, Agreement, read_agreement
from .context import RunContext
from .distributed import all_reduce_sum


def vote(
    ctx: RunContext, loss_sum: torch.Tensor, grad_norm: torch.Tensor, own_seconds: float
) -> tuple[Agreement, float]:
    """Every rank's agreed view of the step, and ``perf_counter`` when this rank reached it."""
    world = ctx.env.world_size
    own_slots = world if world > 1 else 0  # also with detection off: every rank's vector has one length
    votes = torch.zeros(REDUCED_SLOTS + own_slots, dtype=loss_sum.dtype, device=ctx.device)
    norm = grad_norm.to(ctx.device, votes.dtype)
    votes[LOSS] = loss_sum
    votes[STOP] = float(ctx.io.stop.requested)  # a scalar fill: no host-to-device copy
    votes[LOSS_NONFINITE] = (~torch.isfinite(loss_sum)).to(votes.dtype)
    votes[GRAD_NONFINITE] = (~torch.isfinite(norm)).to(votes.dtype)
    if own_slots:  # one slot per rank, only ours non-zero: the sum is every rank's own time
        votes[REDUCED_SLOTS + ctx.env.rank] = own_seconds
    ready_at = time.perf_counter()
    all_reduce_sum(votes)
    unreduced = torch.stack([norm, ctx.precision.scale_tensor().to(votes.dtype)])
    agreed = read_agreement(torch.cat([votes, unreduced]).tolist(), world, own_slots,
                            loss_scaling=ctx.precision.scaler is not None)
    return agreed, ready_at
