"""Built-in training tasks (no downloads) and the ``--entrypoint`` plug-in for user tasks.

Every task is (model, map-style dataset, loss_fn). The dataset is built identically on every rank
from the seed; the sharding plan, not the dataset, decides who trains on what. ``loss_fn`` must
return the *mean* loss over the batch it is given (PyTorch's default reduction): the loop turns
per-rank means into the exact global mean (see sharding.py).

User entry points: ``--entrypoint my_pkg.train:build`` imports ``my_pkg.train`` and calls
``build()`` with no arguments, after ``torch.manual_seed(--seed)`` so a randomly initialised
model is the same on every rank (DDP also broadcasts rank 0's parameters). It returns
``(model, dataset)`` or ``(model, dataset, loss_fn)``; the default loss is cross-entropy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from .batched import BatchedTensorDataset
from .transformer import TokenClassifier, token_dataset

LossFn = Callable[[Any, Any], torch.Tensor]
BUILTIN_TASKS = ("linear", "mlp", "cnn", "transformer")


class TaskError(ValueError):
    """The task or entry point cannot be built; the message says what to change."""


@dataclass
class Task:
    """What the loop trains, plus per-task defaults for flags the user did not set."""

    name: str
    model: nn.Module
    dataset: Dataset[Any]
    loss_fn: LossFn
    defaults: dict[str, Any] = field(default_factory=dict)


class LinearRegression(nn.Module):
    """OneFlow's DDP example: y = x @ w, w starts at zero and must converge to [2, 3]."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


# OneFlow's two-rank data: rank 0 holds the first two rows, rank 1 the last two (no shuffle, global
# batch 4), and with world size 1 the single process holds all four.
LINEAR_X = [[1.0, 2.0], [2.0, 3.0], [4.0, 6.0], [3.0, 1.0]]
LINEAR_Y = [[8.0], [13.0], [26.0], [9.0]]


def _linear(seed: int, dataset_size: int | None, world_size: int) -> Task:
    if dataset_size not in (None, 4):
        raise TaskError("--dataset-size does not apply to --task linear (its dataset is OneFlow's 4 samples)")
    dataset = BatchedTensorDataset(torch.tensor(LINEAR_X), torch.tensor(LINEAR_Y))
    batch = 4 // world_size if 4 % world_size == 0 else 1
    return Task("linear", LinearRegression(), dataset, F.mse_loss,
                {"batch_size": batch, "lr": 0.02, "steps": 500, "shuffle": False})


def _mlp(seed: int, dataset_size: int | None, world_size: int) -> Task:
    size = dataset_size or 2048
    gen = torch.Generator().manual_seed(seed + 1)
    features, classes = 32, 4
    inputs = torch.randn(size, features, generator=gen)
    teacher = torch.randn(features, classes, generator=gen)
    targets = (inputs @ teacher).argmax(dim=1)  # a learnable labelling, not noise
    model = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))
    return Task("mlp", model, BatchedTensorDataset(inputs, targets), F.cross_entropy,
                {"batch_size": 32, "lr": 0.1, "steps": 200})


class SmallConvNet(nn.Module):
    """Two conv layers and a linear head: enough to exercise conv kernels, cheap on CPU."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(self.features(x).flatten(1))
        return logits


def _cnn(seed: int, dataset_size: int | None, world_size: int) -> Task:
    size = dataset_size or 512
    gen = torch.Generator().manual_seed(seed + 2)
    classes = 4
    templates = torch.randn(classes, 3, 16, 16, generator=gen)
    targets = torch.randint(0, classes, (size,), generator=gen)
    inputs = templates[targets] + 0.5 * torch.randn(size, 3, 16, 16, generator=gen)
    return Task("cnn", SmallConvNet(classes), BatchedTensorDataset(inputs, targets), F.cross_entropy,
                {"batch_size": 16, "lr": 0.2, "steps": 100})


def _transformer(seed: int, dataset_size: int | None, width: int | None) -> Task:
    if width is not None and (width < 8 or width % 8):
        raise TaskError(f"--model-width must be a multiple of 8 and >= 8, got {width}")
    model = TokenClassifier(width or 256)
    dataset = token_dataset(seed + 3, dataset_size or 2048)
    return Task("transformer", model, dataset, F.cross_entropy, {"batch_size": 32, "lr": 0.05, "steps": 100})


_BUILDERS = {"linear": _linear, "mlp": _mlp, "cnn": _cnn}


def build_task(
    name: str, *, seed: int, dataset_size: int | None = None, world_size: int = 1, model_width: int | None = None,
) -> Task:
    """Build a built-in task; model init and data depend only on ``seed``, never on the rank."""
    if name not in (*_BUILDERS, "transformer"):
        raise TaskError(f"--task must be one of {', '.join(BUILTIN_TASKS)}, got {name!r}")
    if model_width is not None and name != "transformer":
        raise TaskError(f"--model-width applies only to --task transformer, not {name!r}")
    torch.manual_seed(seed)
    if name == "transformer":
        return _transformer(seed, dataset_size, model_width)
    return _BUILDERS[name](seed, dataset_size, world_size)


def load_entrypoint(spec: str, *, seed: int) -> Task:
    """Import ``module:function`` and build a Task from what it returns."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise TaskError(f"--entrypoint must look like 'package.module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskError(f"--entrypoint {spec}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?") from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise TaskError(f"--entrypoint {spec}: {module_name!r} has no callable {func_name!r}")
    torch.manual_seed(seed)
    result = func()
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise TaskError(f"--entrypoint {spec} must return (model, dataset) or (model, dataset, loss_fn), "
                        f"got {type(result).__name__}")
    model, dataset = result[0], result[1]
    loss_fn = result[2] if len(result) == 3 else F.cross_entropy
    if not isinstance(model, nn.Module):
        raise TaskError(f"--entrypoint {spec}: the model must be a torch.nn.Module, got {type(model).__name__}")
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise TaskError(f"--entrypoint {spec}: the dataset must be map-style (__len__ and __getitem__)")
    return Task(spec, model, dataset, loss_fn, {})
