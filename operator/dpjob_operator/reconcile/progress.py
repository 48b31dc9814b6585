"""Progress policy: ``status.progress`` from rank 0's latest report, written at most every few seconds.

The report comes from the controller's read of rank 0's metrics endpoint (api/progress.py: the
contract). This module decides what the status says and when it is worth a write:

- only reports of the current gang count (a read of an older generation's pod, still in flight
  when the gang restarted, is ignored);
- the rate (steps and samples per second) is measured between the report that first showed the
  current step and the one before the step last moved, on the trainer's step times, so a slow
  step (longer than a read period) is measured right and nothing is averaged across a restart;
- a progress-only write happens when the step moved and the last one is ``PROGRESS_SECONDS``
  old: at most 6 writes per job per minute whatever the number of ranks. When the pass writes
  anyway (a phase change, a condition), the progress rides along for free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dpjob_operator.api.progress import PROGRESS_SECONDS, ProgressReport, ProgressView
from dpjob_operator.api.status import Progress, SlowestRank
from dpjob_operator.api.timestamps import iso, parse_iso
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext


def apply_progress(ctx: PassContext, view: ProgressView | None) -> None:
    """Record the latest report of the current gang when due. Runs last in a pass: it needs to
    know whether the pass writes the status anyway."""
    # The gang this pass began with: a pass that restarts it still records its last report.
    if view is None or view.restart != ctx.old.generation or view.latest is None:
        return  # nothing read yet, or a read of an older gang's pod (in flight when the gang restarted)
    old = ctx.old.progress or Progress()
    new = build_progress(view.latest, view.base, old, ctx.now)
    if ctx.status.phase in r.TERMINAL:
        new = replace(new, eta=None, remaining=None)  # the run is over: no estimate left to make
    if _due(ctx, old, new):
        ctx.status = replace(ctx.status, progress=new)
        _announce_straggler(ctx, old, new)


def _announce_straggler(ctx: PassContext, old: Progress, new: Progress) -> None:
    """One Warning event when a straggler appears or another rank becomes it."""
    slow = new.slowest_rank
    if slow is None or (old.slowest_rank or SlowestRank()).rank == slow.rank:
        return
    ctx.events.append(Event("Warning", r.STRAGGLER,
                            f"rank {slow.rank} is a straggler: its own step time is {slow.ratio}x the "
                            f"median of the ranks' (its node or device is slower; the gang runs at its pace)"))


def _due(ctx: PassContext, old: Progress, new: Progress) -> bool:
    if ctx.status != ctx.old or old == Progress() or old.restart != new.restart:
        return True
    if (old.step, old.checkpoint_step) == (new.step, new.checkpoint_step):
        return False
    written = parse_iso(old.observed_time)
    return written is None or (ctx.now - written).total_seconds() >= PROGRESS_SECONDS


def progress_status(rep: ProgressReport, base: ProgressReport | None, old: Mapping[str, Any],
                    now: datetime) -> dict[str, Any]:
    """The ``status.progress`` object for ``rep``, on the wire (see ``build_progress``)."""
    return build_progress(rep, base, Progress.from_dict(old), now).to_dict()


def build_progress(rep: ProgressReport, base: ProgressReport | None, old: Progress, now: datetime) -> Progress:
    """``status.progress`` for ``rep``; ``old`` lends its rates when no new one is measurable (the
    first report after an operator restart)."""
    steps_per_second, samples_per_second = _rates(rep, base)
    if steps_per_second is None and old.restart == rep.restart:
        steps_per_second, samples_per_second = old.steps_per_second, old.samples_per_second
    total = rep.total_steps or None
    percent = min(100, max(0, 100 * rep.step // total)) if total else None
    eta, remaining = _estimate(rep, total, steps_per_second, now) if total else (None, None)
    slowest = None if rep.straggler_rank is None else \
        SlowestRank(rank=rep.straggler_rank, ratio=float(f"{rep.slowest_ratio or 0:.3g}"))
    return Progress(
        restart=rep.restart, step=rep.step, total_steps=total, percent=percent,
        summary=f"{rep.step}/{total} ({percent}%)" if total else f"step {rep.step}",
        steps_per_second=steps_per_second, samples_per_second=samples_per_second, eta=eta, remaining=remaining,
        loss=None if rep.loss is None else float(f"{rep.loss:.6g}"), epoch=rep.epoch,
        last_step_time=_time(rep.last_step_time), checkpoint_step=rep.checkpoint_step,
        checkpoint_time=None if rep.checkpoint_time is None else _time(rep.checkpoint_time),
        observed_time=_time(rep.observed_at), slowest_rank=slowest)


def _rates(rep: ProgressReport, base: ProgressReport | None) -> tuple[float | None, float | None]:
    """Steps and samples per second between ``base`` and ``rep`` (same gang, the step moved)."""
    if base is None or base.restart != rep.restart or rep.step <= base.step:
        return None, None
    seconds = rep.last_step_time - base.last_step_time
    if seconds <= 0:
        return None, None
    samples = None
    if rep.global_samples is not None and base.global_samples is not None \
            and rep.global_samples >= base.global_samples:
        samples = _sig((rep.global_samples - base.global_samples) / seconds)
    return _sig((rep.step - base.step) / seconds), samples


def _estimate(rep: ProgressReport, total: int, steps_per_second: float | None,
              now: datetime) -> tuple[str | None, str | None]:
    """``eta`` (when the last step is due) and ``remaining`` (from now, for ``kubectl get``)."""
    left = max(0, total - rep.step)
    if left and not steps_per_second:
        return None, None
    eta = rep.last_step_time + (left / steps_per_second if left and steps_per_second else 0.0)
    return _time(eta), human_duration(max(0.0, eta - now.timestamp()))


def human_duration(seconds: float) -> str:
    """Like kubectl's ages: ``45s``, ``7m30s``, ``42m``, ``5h12m``, ``3d4h``."""
    s = round(seconds)
    if s < 120:
        return f"{s}s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 48:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"


def _sig(value: float) -> float:
    return float(f"{value:.4g}")


def _time(unix: float) -> str:
    return iso(datetime.fromtimestamp(unix, UTC))
