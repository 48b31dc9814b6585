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
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable
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
