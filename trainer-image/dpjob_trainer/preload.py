"""The warm state of a warm-restart supervisor (warm.py): what a training process would import."""

from __future__ import annotations


def preload() -> None:
    """What every training process imports, once in the supervisor before the first fork (its warm
    state): every module a training process would otherwise import after the fork, so that a warm
    restart imports nothing. Only imports: the supervisor runs no torch operation (no OpenMP pool
    exists when it forks), as a DataLoader forks its workers."""
    import encodings.idna  # noqa: F401  (resolving MASTER_ADDR)

    import prometheus_client.exposition
    import prometheus_client.gc_collector
    import prometheus_client.process_collector  # noqa: F401
    import torch
    import torch._dynamo
    import torch.distributed
    import torch.utils.serialization  # noqa: F401

    from . import checkpoint, devices, distributed, loop, tasks, train  # noqa: F401
