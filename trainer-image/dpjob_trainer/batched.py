"""A map-style dataset of in-memory tensors that the DataLoader indexes a whole batch at a time."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class BatchedTensorDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Tensors indexed a whole batch at a time (``__getitems__``): no per-sample Python collate."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        if len(inputs) != len(targets):
            raise ValueError(f"inputs ({len(inputs)}) and targets ({len(targets)}) differ in length")
        self.inputs, self.targets = inputs, targets

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self.inputs[idx], self.targets[idx]
