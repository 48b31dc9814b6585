"""What a run tells the user: the ``start`` line, the per-rank report and the ``done`` line.

The report's keys and the log lines are documented in docs/trainer.md; tests and the operator
read them, so they change only together with that page.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import asdict
from typing import Any

import torch

from .context import RunContext
from .events import write_report
from .exits import EXIT_PREEMPTED
from .loop import RunStats
from .tasks import Task


def _float32_bytes(tensor: torch.Tensor) -> bytes:
    """The values as float32 bytes, read straight from memory: the same bytes as numpy's
    ``tobytes()`` without needing numpy, at memcpy speed (``bytes()`` of a storage goes element by
    element, minutes for a model of tens of millions of parameters)."""
    flat = tensor.detach().to("cpu", torch.float32).contiguous().clone()  # owned by us while read
    if flat.numel() == 0:
        return b""
    return ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())


def param_sha256(model: torch.nn.Module) -> str:
    """sha256 over all parameters as float32 bytes in ``parameters()`` order: equal iff identical."""
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(_float32_bytes(p))
    return digest.hexdigest()


def announce_start(ctx: RunContext, task: Task, start_step: int) -> None:
    """The metrics' info and total steps, and the ``start`` log line."""
    env, cfg, s = ctx.env, ctx.cfg, ctx.settings
    ctx.metrics.set_info(
        world_size=str(env.world_size), backend=ctx.backend, torch_version=torch.__version__,
        task=task.name, rank=str(env.rank), job_name=env.job_name, restart=str(env.restart_count),
    )  # fmt: skip
    ctx.metrics.set_total_steps(s.total_steps)
    ctx.log(
        "start", world_size=env.world_size, local_rank=env.local_rank, backend=ctx.backend,
        device=str(ctx.device), task=task.name, job=env.job_name, restart_count=env.restart_count,
        warm_restart=env.warm_restart, start_step=start_step,
        total_steps=s.total_steps, batch_size=s.batch_size, global_batch_size=s.plan.window_size,
        grad_accum=cfg.grad_accum, grad_reduction=cfg.grad_reduction, lr=s.lr, precision=ctx.precision.name,
        amp=ctx.precision.name != "fp32", tail=cfg.tail,
        dataset_size=s.plan.dataset_size, steps_per_epoch=s.plan.steps_per_epoch,
    )  # fmt: skip


def write_rank_report(
    ctx: RunContext, model: torch.nn.Module, task: Task, steps: tuple[int, int], code: int, stats: RunStats,
    skipped_steps: int,
) -> dict[str, Any]:
    """The per-rank report, written to ``--report`` when given; ``steps`` is (step reached, step
    this run started from)."""
    env, cfg, step, start_step = ctx.env, ctx.cfg, steps[0], steps[1]
    report = {
        "rank": env.rank, "world_size": env.world_size, "backend": ctx.backend, "task": task.name,
        "steps": step, "steps_this_run": step - start_step, "resumed_from_step": start_step,
        "samples": stats.samples, "global_samples": stats.global_samples, "train_seconds": stats.train_seconds,
        "initial_loss": stats.initial_loss, "final_loss": stats.final_loss,
        "param_sha256": param_sha256(model), "grad_reduction": cfg.grad_reduction, "grad_accum": cfg.grad_accum,
        "batch_size": ctx.settings.batch_size, "lr": ctx.settings.lr, "precision": ctx.precision.name,
        "amp": ctx.precision.name != "fp32", "scaler_skipped_steps": stats.scaler_skipped,
        "preempted": code == EXIT_PREEMPTED, "exit_code": code, "skipped_steps": skipped_steps,
        "config": asdict(cfg),
    }  # fmt: skip
    if task.name == "linear":
        report["weights"] = [float(v) for v in model.get_parameter("w").detach().cpu().flatten()]
    if cfg.report_dir:
        write_report(cfg.report_dir, env.rank, report)
    return report


def announce_done(ctx: RunContext, report: dict[str, Any], stats: RunStats) -> None:
    """The ``done`` log line, from the report."""
    code = report["exit_code"]
    ctx.log(
        "done", steps=report["steps"], final_loss=report["final_loss"], param_sha256=report["param_sha256"],
        preempted=code == EXIT_PREEMPTED, exit_code=code, skipped_steps=report["skipped_steps"],
        train_seconds=round(stats.train_seconds, 6),
        samples_per_second=round(stats.global_samples / max(stats.train_seconds, 1e-9), 2),
    )  # fmt: skip
