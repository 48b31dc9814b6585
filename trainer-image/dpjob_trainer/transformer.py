"""The ``transformer`` task's model and data: real GPU work (matrix multiplies, attention, layer
norms in every step) at a size set by one knob, ``--model-width``, on synthetic tokens.

The data is a classification the model can learn: each sequence's tokens come, half of the time,
from its class's quarter of the vocabulary and otherwise from the whole vocabulary. Dropout is 0,
so a step is a pure function of the weights and the batch, and N ranks still equal one process
(the sharding contract every task keeps).
"""

from __future__ import annotations

import torch
from torch import nn

from .batched import BatchedTensorDataset

VOCAB = 256
SEQ_LEN = 128
CLASSES = 4
LAYERS = 4


class TokenClassifier(nn.Module):
    """Token and position embeddings, ``LAYERS`` pre-norm encoder layers, mean pooling, a linear head."""

    def __init__(self, width: int) -> None:
        super().__init__()
        heads = max(1, width // 64)  # 64-wide heads, as in most transformer configurations
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(0.02 * torch.randn(SEQ_LEN, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(self.embed(tokens) + self.position[: tokens.shape[1]])
        logits: torch.Tensor = self.head(self.norm(hidden).mean(dim=1))
        return logits


def token_dataset(seed: int, size: int) -> BatchedTensorDataset:
    """``size`` sequences of ``SEQ_LEN`` token ids and their class, the same for every rank."""
    gen = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, CLASSES, (size,), generator=gen)
    band = VOCAB // CLASSES
    in_band = targets[:, None] * band + torch.randint(0, band, (size, SEQ_LEN), generator=gen)
    anywhere = torch.randint(0, VOCAB, (size, SEQ_LEN), generator=gen)
    tokens = torch.where(torch.rand(size, SEQ_LEN, generator=gen) < 0.5, in_band, anywhere)
    return BatchedTensorDataset(tokens, targets)
