"""Checkpoint files: written atomically by rank 0, read by every rank.

A preempted pod can be killed (SIGKILL after the grace period) in the middle of a write, and a
restarted job must never load half a file. So rank 0 writes ``checkpoint.pt.tmp-<pid>`` in the
same directory, fsyncs it, ``os.replace``-s it over ``checkpoint.pt`` (atomic on POSIX within
one filesystem) and fsyncs the directory. Readers therefore see either the previous complete
checkpoint or the new complete one.

Only one checkpoint is kept: the trainer's state is small next to the time a restart loses, and
one file keeps "which one do I resume from?" trivial. Every rank loads the same file, which means
``--checkpoint-dir`` must be a volume shared by all rank pods (the trainer verifies that all
ranks resumed from the same step and fails loudly otherwise).

Because only one checkpoint is kept, writing a bad one loses the last good state for good: the
trainer asks ``nonfinite_entries`` first and refuses to save NaN or Inf weights (train.py).
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable, Iterator
from typing import IO, Any

CHECKPOINT_NAME = "checkpoint.pt"


def checkpoint_path(directory: str) -> str:
    return os.path.join(directory, CHECKPOINT_NAME)


def atomic_write(path: str, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` via a temp file + fsync + os.replace so readers never see a partial file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # A previous writer killed mid-write leaves a temp file behind; it is garbage by definition.
    for stale in glob.glob(glob.escape(path) + ".tmp-*"):
        with contextlib.suppress(OSError):
            os.remove(stale)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def save_checkpoint(directory: str, state: dict[str, Any]) -> str:
    """Atomically write ``state`` (torch-serialisable) as the job's checkpoint; return its path."""
    import torch

    path = checkpoint_path(directory)
    atomic_write(path, lambda fh: torch.save(state, fh))
    return path


def load_checkpoint(directory: str) -> dict[str, Any] | None:
    """Return the saved state, or None when the directory holds no checkpoint yet."""
    import torch

    path = checkpoint_path(directory)
    if not os.path.exists(path):
        return None
    # weights_only: the file sits on a shared volume; never unpickle arbitrary objects from it.
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def _floating_tensors(obj: Any, name: str) -> Iterator[tuple[str, Any]]:
    """(dotted name, tensor) for every floating-point tensor in a nested state dict."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            yield name, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _floating_tensors(value, f"{name}.{key}" if name else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _floating_tensors(value, f"{name}.{i}" if name else str(i))


def nonfinite_entries(state: Any) -> list[str]:
    """Names of the floating-point tensors in ``state`` (a nested state dict: model weights,
    optimizer moments) that hold a NaN or an Inf; empty when everything is finite.

    One host synchronisation per device rather than one per tensor: a model has hundreds of them,
    and on a GPU every ``.item()`` waits for the device.
    """
    import torch

    named = list(_floating_tensors(state, ""))
    flags = [torch.isfinite(t).all() for _, t in named]
    by_device: dict[Any, list[Any]] = {}
    for flag in flags:
        by_device.setdefault(flag.device, []).append(flag)
    if all(bool(torch.stack(group).all()) for group in by_device.values()):
        return []
    return [name for (name, _), flag in zip(named, flags, strict=True) if not bool(flag)]
