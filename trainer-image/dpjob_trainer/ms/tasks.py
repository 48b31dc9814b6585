"""The built-in tasks in MindSpore: the torch tasks' shapes (tasks.py), synthetic data from --seed.

The dataset is a pair of numpy arrays built identically on every rank from the seed; the
sharding (MindSpore's ``num_shards``/``shard_id``), not the dataset, decides who trains on what.
The models are initialised after ``mindspore.set_seed(seed)`` on every rank, so every rank starts
from the same parameters without a broadcast (the report's first hash lets tests check that).
The numbers differ from the torch tasks' (another random generator), the shapes do not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from .config import TASKS

# OneFlow's DDP example, as in tasks.py: y = x @ w, w starts at zero and converges to [2, 3].
LINEAR_X = [[1.0, 2.0], [2.0, 3.0], [4.0, 6.0], [3.0, 1.0]]
LINEAR_Y = [[8.0], [13.0], [26.0], [9.0]]


class LinearRegression(nn.Cell):  # type: ignore[misc]
    """y = x @ w with one (2, 1) parameter named ``w``, like the torch task."""

    def __init__(self) -> None:
        super().__init__()
        self.w = Parameter(Tensor(np.zeros((2, 1), np.float32)), name="w")

    def construct(self, x: Tensor) -> Tensor:
        return ops.matmul(x, self.w)


@dataclass
class MsTask:
    """What the loop trains: the network, the whole dataset (numpy) and the mean loss."""

    name: str
    net: Any  # nn.Cell; Any because mindspore ships no type information
    inputs: np.ndarray
    targets: np.ndarray
    loss_fn: Callable[[Any, Any], Any]


def _linear(seed: int, size: int) -> MsTask:
    inputs, targets = np.array(LINEAR_X, np.float32), np.array(LINEAR_Y, np.float32)
    return MsTask("linear", LinearRegression(), inputs, targets, nn.MSELoss())


def _mlp(seed: int, size: int) -> MsTask:
    rng = np.random.RandomState(seed + 1)
    features, classes = 32, 4
    inputs = rng.randn(size, features).astype(np.float32)
    teacher = rng.randn(features, classes).astype(np.float32)
    targets = (inputs @ teacher).argmax(axis=1).astype(np.int32)  # a learnable labelling, not noise
    net = nn.SequentialCell(nn.Dense(features, 64), nn.ReLU(), nn.Dense(64, classes))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return MsTask("mlp", net, inputs, targets, loss)


_BUILDERS = {"linear": _linear, "mlp": _mlp}
assert tuple(_BUILDERS) == TASKS


def build_task(name: str, *, seed: int, dataset_size: int) -> MsTask:
    """Build a built-in task; parameters and data depend only on ``seed``, never on the rank."""
    ms.set_seed(seed)
    return _BUILDERS[name](seed, dataset_size)
