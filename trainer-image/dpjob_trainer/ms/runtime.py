"""The MindSpore side of the data-parallel recipe: group start-up and the few collectives.

Follows MindSpore's "Data Parallel" guide: ``mindspore.communication.init()``, then
``set_auto_parallel_context(parallel_mode=DATA_PARALLEL, gradients_mean=...)`` before any
network is built (the guide's rule: the parallel mode must be set before initialisers run), and
``nn.DistributedGradReducer`` over the optimizer's parameters in the loop (train.py). PyNative
mode: the steps are tiny, and graph compilation would cost more than the training.
"""

from __future__ import annotations

import os
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init

# MindSpore's collective library per device target (CPU: its own "mccl" over TCP).
BACKENDS = {"CPU": "mccl", "Ascend": "hccl", "GPU": "nccl"}


def configure_device() -> str:
    """PyNative mode on ``DPJOB_MS_DEVICE`` (CPU, Ascend, GPU) if set, else MindSpore's default."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    device = (os.environ.get("DPJOB_MS_DEVICE") or "").strip()
    if device:
        ms.set_device(device)
    return str(ms.get_context("device_target"))


def host_scheduler() -> None:
    """msrun's scheduler process: ``init()`` hosts the cluster and ends the process when it ends."""
    init()


def start_group(gradients_mean: bool) -> tuple[int, int]:
    """Join the group and set data parallel; returns (rank, group size) as MindSpore assigned them."""
    init()
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=gradients_mean)
    return int(get_rank()), int(get_group_size())


def grad_reducer(parameters: Any, world_size: int) -> Any:
    """The recipe's gradient all-reduce (mean or sum from the parallel context); None alone."""
    return nn.DistributedGradReducer(parameters) if world_size > 1 else None


class Collectives:
    """Sums over ranks of a few numbers (float32: exact for step counts below 2**24); no-op alone.

    Only sums: MindSpore's CPU AllReduce supports no other operation, and every rank's own value
    can still be had from a sum (``gather``: one slot per rank, only its own non-zero).
    """

    def __init__(self, world_size: int, rank: int = 0) -> None:
        self.world_size, self.rank = world_size, rank
        if world_size > 1:
            self._sum = ops.AllReduce(ops.ReduceOp.SUM)

    def sum(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return list(values)
        return [float(v) for v in self._sum(Tensor(np.array(values, np.float32))).asnumpy()]

    def gather(self, value: float) -> list[float]:
        """Every rank's ``value``, indexed by rank."""
        slots = [0.0] * self.world_size
        slots[self.rank] = value
        return self.sum(slots)
