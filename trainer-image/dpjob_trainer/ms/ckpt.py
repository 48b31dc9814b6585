"""MindSpore checkpoints: ``save_checkpoint``/``load_checkpoint`` of the optimizer cell, with the step.

The optimizer cell is saved rather than the network because it holds the network's parameters
*and* its own state (SGD's momentum ``accum``/``stat``, ``global_step``, the learning rate), all
of which a resumed run needs to continue exactly where an uninterrupted one would be. The step,
task and global batch go in ``append_dict``. As in checkpoint.py, rank 0 writes a temporary file
in the same directory and renames it over ``ms-checkpoint.ckpt``, so a pod killed mid-write
never leaves half a file for the restarted job to load.
"""

from __future__ import annotations

import os
import time
from typing import Any

import mindspore as ms

from ..config import ConfigError

CHECKPOINT_NAME = "ms-checkpoint.ckpt"


def checkpoint_path(directory: str) -> str:
    return os.path.join(directory, CHECKPOINT_NAME)


def save(directory: str, optimizer: Any, *, step: int, task: str, global_batch: int, seed: int) -> str:
    """Atomically write the optimizer cell (parameters + state) and the step; returns the path."""
    os.makedirs(directory, exist_ok=True)
    path = checkpoint_path(directory)
    tmp = os.path.join(directory, f".ms-checkpoint.tmp-{os.getpid()}.ckpt")  # save_checkpoint wants .ckpt
    extra = {"step": step, "task": task, "global_batch_size": global_batch, "seed": seed, "time": time.time()}
    try:
        ms.save_checkpoint(optimizer, tmp, append_dict=extra)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _scalar(value: Any) -> Any:
    """append_dict numbers come back as 0-d Parameters, strings as str."""
    return value.asnumpy().item() if hasattr(value, "asnumpy") else value


def load(directory: str, optimizer: Any, *, task: str) -> tuple[int, float | None, int | None] | None:
    """Load the checkpoint into the optimizer cell; (step, save time, global batch) or None if absent."""
    path = checkpoint_path(directory)
    if not os.path.exists(path):
        return None
    params = ms.load_checkpoint(path)
    extra = {k: _scalar(params.pop(k)) for k in ("step", "task", "global_batch_size", "seed", "time") if k in params}
    if extra.get("task") != task:
        raise ConfigError(f"the checkpoint {path} is for task {extra.get('task')!r}, not {task!r}; "
                          f"use a fresh --checkpoint-dir")
    missing, _ = ms.load_param_into_net(optimizer, params)
    if missing:
        raise ConfigError(f"the checkpoint {path} lacks {', '.join(missing[:5])}: it was written for another model")
    batch = extra.get("global_batch_size")
    return int(extra["step"]), extra.get("time"), int(batch) if batch is not None else None
