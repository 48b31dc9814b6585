"""The next micro-batch, taken from the data loader and queued for the device before the host
waits for the current step.

On a GPU the host queues a step's kernels and then waits once, for the step's small all-reduce
(agreement.py), because the update must know whether every rank's numbers were finite. Whatever
the host does between that wait and queueing the next forward pass leaves the GPU idle; taking
the next batch from the DataLoader (indexing, pinning) and starting its copy is such work. So the
loop fetches the next batch right after queueing a backward pass (``prefetch``) and the next
micro-batch finds it ready (``take``). The order of batches does not change (the sampler is a
pure function of the micro-batch index), only the moment they are fetched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch


def to_device(obj: Any, device: torch.device) -> Any:
    """Tensors in ``obj`` (nested lists, tuples, dicts) on ``device``; copies from pinned memory
    are queued without waiting."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


class Prefetcher:
    """Holds at most one batch ahead of the loop, already on its way to the device."""

    def __init__(self, batches: Iterator[Any], device: torch.device) -> None:
        self._batches, self._device = batches, device
        self._next: tuple[Any, float] | None = None

    def prefetch(self) -> None:
        """Take the next batch now, unless one is already waiting."""
        if self._next is None:
            started = time.perf_counter()
            batch = next(self._batches)
            self._next = (to_device(batch, self._device), time.perf_counter() - started)

    def take(self) -> tuple[Any, float]:
        """The next batch and the seconds spent waiting for the data loader to produce it."""
        self.prefetch()
        assert self._next is not None
        ready, self._next = self._next, None
        return ready
