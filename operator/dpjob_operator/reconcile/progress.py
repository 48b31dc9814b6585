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

from datetime import UTC, datetime
from typing import Any

from dpjob_operator.api.progress import PROGRESS_SECONDS, ProgressReport, ProgressView
from dpjob_operator.api.timestamps import iso, parse_iso
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext

RATE_FIELDS = ("stepsPerSecond", "samplesPerSecond")


def apply_progress(ctx: PassContext, view: ProgressView | None) -> None:
    """Record the latest report of the current gang when due. Runs last in a pass: it needs to
    know whether the pass writes the status anyway."""
    # The gang this pass began with: a pass that restarts it still records its last report.
    if view is None or view.restart != int(ctx.old.get("restarts", 0)) or view.latest is None:
        return  # nothing read yet, or a read of an older gang's pod (in flight when the gang restarted)
    old: dict[str, Any] = dict(ctx.old.get("progress") or {})
    new = progress_status(view.latest, view.base, old, ctx.now)
    if ctx.status.get("phase") in r.TERMINAL:
        new.pop("eta", None)  # the run is over: no estimate left to make
        new.pop("remaining", None)
    if _due(ctx, old, new):
        ctx.status["progress"] = new
        _announce_straggler(ctx, old, new)


def _announce_straggler(ctx: PassContext, old: dict[str, Any], new: dict[str, Any]) -> None:
    """One Warning event when a straggler appears or another rank becomes it."""
    slow = new.get("slowestRank")
    if slow is None or (old.get("slowestRank") or {}).get("rank") == slow["rank"]:
        return
    ctx.events.append(Event("Warning", r.STRAGGLER,
                            f"rank {slow['rank']} is a straggler: its own step time is {slow['ratio']}x the "
                            f"median of the ranks' (its node or device is slower; the gang runs at its pace)"))


def _due(ctx: PassContext, old: dict[str, Any], new: dict[str, Any]) -> bool:
    if ctx.status != ctx.old or not old or old.get("restart") != new["restart"]:
        return True
    if (old.get("step"), old.get("checkpointStep")) == (new["step"], new.get("checkpointStep")):
        return False
    written = parse_iso(old.get("observedTime"))
    return written is None or (ctx.now - written).total_seconds() >= PROGRESS_SECONDS


def progress_status(rep: ProgressReport, base: ProgressReport | None, old: dict[str, Any],
                    now: datetime) -> dict[str, Any]:
    """The ``status.progress`` object for ``rep``; ``old`` lends its rates when no new one is measurable
    (the first report after an operator restart)."""
    out: dict[str, Any] = {"restart": rep.restart, "step": rep.step, "lastStepTime": _time(rep.last_step_time),
                           "observedTime": _time(rep.observed_at)}
    rates = _rates(rep, base)
    if not rates and old.get("restart") == rep.restart:
        rates = {k: old[k] for k in RATE_FIELDS if k in old}
    out.update(rates)
    if rep.total_steps:
        out.update(totalSteps=rep.total_steps, percent=min(100, max(0, 100 * rep.step // rep.total_steps)))
        out.update(_estimate(rep, rep.total_steps, rates.get("stepsPerSecond"), now))
    out["summary"] = f"{rep.step}/{rep.total_steps} ({out['percent']}%)" if rep.total_steps else f"step {rep.step}"
    if rep.loss is not None:
        out["loss"] = float(f"{rep.loss:.6g}")
    if rep.epoch is not None:
        out["epoch"] = rep.epoch
    if rep.checkpoint_step is not None:
        out["checkpointStep"] = rep.checkpoint_step
    if rep.checkpoint_time is not None:
        out["checkpointTime"] = _time(rep.checkpoint_time)
    if rep.straggler_rank is not None:
        out["slowestRank"] = {"rank": rep.straggler_rank, "ratio": float(f"{rep.slowest_ratio or 0:.3g}")}
    return out


def _rates(rep: ProgressReport, base: ProgressReport | None) -> dict[str, float]:
    """Steps and samples per second between ``base`` and ``rep`` (same gang, the step moved)."""
    if base is None or base.restart != rep.restart or rep.step <= base.step:
        return {}
    seconds = rep.last_step_time - base.last_step_time
    if seconds <= 0:
        return {}
    rates = {"stepsPerSecond": _sig((rep.step - base.step) / seconds)}
    if rep.global_samples is not None and base.global_samples is not None \
            and rep.global_samples >= base.global_samples:
        rates["samplesPerSecond"] = _sig((rep.global_samples - base.global_samples) / seconds)
    return rates


def _estimate(rep: ProgressReport, total: int, steps_per_second: float | None, now: datetime) -> dict[str, str]:
    """``eta`` (when the last step is due) and ``remaining`` (from now, for ``kubectl get``)."""
    left = max(0, total - rep.step)
    if left and not steps_per_second:
        return {}
    eta = rep.last_step_time + (left / steps_per_second if left and steps_per_second else 0.0)
    return {"eta": _time(eta), "remaining": human_duration(max(0.0, eta - now.timestamp()))}


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
