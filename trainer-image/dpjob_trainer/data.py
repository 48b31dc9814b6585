"""This rank's micro-batches: its shard of the global batch, in the plan's order, on the device."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, default_collate

from .batched import BatchedTensorDataset
from .prefetch import Prefetcher
from .sharding import ShardPlan


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


def make_batches(
    dataset: Any, plan: ShardPlan, start_micro_batch: int, num_workers: int, device: torch.device
) -> Prefetcher:
    """Micro-batches from ``start_micro_batch`` on, loaded by ``num_workers`` and moved to ``device``."""
    # A second plan instance: DataLoader may prefetch across an epoch boundary while the loop
    # still needs the previous epoch's order.
    sampler_plan = ShardPlan(
        plan.dataset_size, plan.num_shards, plan.shard_id, plan.batch_size,
        accum=plan.accum, seed=plan.seed, shuffle=plan.shuffle, drop_tail=plan.drop_tail,
    )  # fmt: skip
    collate = _identity if isinstance(dataset, BatchedTensorDataset) else default_collate
    loader = DataLoader(
        dataset,
        batch_sampler=_ShardBatchSampler(sampler_plan, start_micro_batch),
        collate_fn=collate,
        num_workers=num_workers,
        pin_memory=device.type == "cuda",
    )
    return Prefetcher(iter(loader), device)
