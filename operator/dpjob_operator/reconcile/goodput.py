"""Goodput policy: ``status.goodput``, the share of the job's wall time spent on steps that count.

Time is lost three ways, and each is measured where it can be known exactly:

- **startup**: ``startTime`` to the first gang's first step (scheduling, image pulls, rendezvous,
  data loading), or to its failure when it never stepped;
- **recovery**, per restart: from the failure (the kubelet's end time of the failed rank's
  container; for a restart without one, such as a stall, the gang's last step) to the new gang's
  first step, from the trainer's ``dpjob_trainer_first_step_timestamp_seconds``;
- **recomputation**, per restart: the steps the failed gang made past the step the new gang resumed
  at (``dpjob_trainer_first_step`` - 1), priced at the measured step rate.

``ratio`` is ``1 - lost / wall`` with the wall time from ``startTime`` to now (or
``completionTime``). It rides along with writes the pass makes anyway, so it never costs a status
write of its own; a restart's entry is written when the restart is booked and completed with the
new gang's first progress report. A script that serves only ``dpjob_trainer_step`` gets recovery
times to within one progress read (``PROGRESS_SECONDS``) and no recomputed steps.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from dpjob_operator.api.progress import ProgressReport, ProgressView
from dpjob_operator.api.status import Goodput, GoodputRestart, JobStatus
from dpjob_operator.api.timestamps import iso, parse_iso
from dpjob_operator.reconcile.context import PassContext

MAX_RESTARTS = 10  # the entries status keeps: the CRD's maxItems
WARM = "Warm"


def account_goodput(ctx: PassContext, view: ProgressView | None) -> None:
    """Open an entry for a restart this pass booked, close one with its new gang's first report, and
    refresh the ratio when the pass writes anyway. Runs after the progress policy."""
    goodput = ctx.status.goodput or Goodput()
    goodput = _open_restart(ctx, goodput)
    goodput = _refine_failed_time(ctx.status, goodput)
    if view is not None and view.latest is not None and view.restart == ctx.generation:
        goodput = _first_report(ctx, goodput, view.latest)
    if goodput != (ctx.old.goodput or Goodput()) or ctx.status != ctx.old:
        ctx.status = replace(ctx.status, goodput=_with_ratio(ctx.status, goodput, ctx.now.timestamp()))


def _open_restart(ctx: PassContext, goodput: Goodput) -> Goodput:
    last, before = ctx.status.last_restart, ctx.old.last_restart
    if last is None or last.restart is None or last.strategy == WARM \
            or (before is not None and before.restart == last.restart and before.strategy == last.strategy):
        return goodput  # a warm restart's entry is written whole when it is booked (reconcile/warm_restarts.py)
    failed = _failed_at(ctx.status, ctx.old.generation)
    booked = parse_iso(last.time) or ctx.now
    failed = min(failed, booked.timestamp()) if failed is not None else booked.timestamp()
    entry = GoodputRestart(restart=last.restart, strategy=last.strategy, reason=last.reason,
                           failed_time=_iso(failed), detect_seconds=_sig(booked.timestamp() - failed))
    if goodput.startup_seconds is None and not goodput.restarts:  # the first gang never stepped
        goodput = replace(goodput, startup_seconds=_since_start(ctx.status, failed))
    restarts = (*(goodput.restarts or ()), entry)[-MAX_RESTARTS:]
    return replace(goodput, restarts=restarts)


def _refine_failed_time(status: JobStatus, goodput: Goodput) -> Goodput:
    """An earlier end for the latest restart's failure, learnt after the restart was booked: an
    in-place restart first blames whichever rank's record arrives first (often a bystander that lost
    its peer a moment later) and names the culprit when its record arrives. Detection and recovery
    both count from the culprit's end."""
    if not goodput.restarts:
        return goodput
    entry, failure = goodput.restarts[-1], status.last_failure
    if failure is None or failure.restart != (entry.restart or 0) - 1:
        return goodput
    better, was = parse_iso(failure.finished_time), parse_iso(entry.failed_time)
    if better is None or was is None or better >= was:
        return goodput
    shift = (was - better).total_seconds()
    refined = replace(entry, failed_time=_iso(better.timestamp()),
                      detect_seconds=None if entry.detect_seconds is None else _sig(entry.detect_seconds + shift),
                      recover_seconds=None if entry.recover_seconds is None else _sig(entry.recover_seconds + shift))
    return replace(goodput, restarts=(*goodput.restarts[:-1], refined))


def _failed_at(status: JobStatus, failed_gen: int) -> float | None:
    """When the gang ``failed_gen`` failed: its failed rank's end, else its last step."""
    failure = status.last_failure
    if failure is not None and failure.restart == failed_gen:
        ended = parse_iso(failure.finished_time)
        if ended is not None:
            return ended.timestamp()
    progress = status.progress
    if progress is not None and progress.restart == failed_gen:
        stepped = parse_iso(progress.last_step_time)
        if stepped is not None:
            return stepped.timestamp()
    return None


def _first_report(ctx: PassContext, goodput: Goodput, report: ProgressReport) -> Goodput:
    """Complete the entry of the restart that started ``report``'s gang, or the startup."""
    first_seen = ctx.old.progress is None or ctx.old.progress.restart != report.restart
    stepped = report.first_step_time if report.first_step_time is not None else (
        report.last_step_time if first_seen else None)
    if stepped is None:
        return goodput
    stepped = min(stepped, report.observed_at)  # a node clock running ahead
    restarts = list(goodput.restarts or ())
    i = next((k for k, e in enumerate(restarts) if e.restart == report.restart), None)
    if i is None:
        if goodput.startup_seconds is None and not restarts:
            return replace(goodput, startup_seconds=_since_start(ctx.status, stepped))
        return goodput
    entry = restarts[i]
    if entry.recover_seconds is not None:
        return goodput
    failed = parse_iso(entry.failed_time)
    recover = None if failed is None else _sig(max(0.0, stepped - failed.timestamp()))
    restarts[i] = replace(entry, recover_seconds=recover, steps_recomputed=_recomputed(ctx.old, entry, report))
    return replace(goodput, restarts=tuple(restarts))


def _recomputed(old: JobStatus, entry: GoodputRestart, report: ProgressReport) -> int | None:
    """Steps the failed gang made past the new gang's resume point (the last step read of it)."""
    failed_gen = (entry.restart or 0) - 1
    progress = old.progress
    if report.first_step is None or progress is None or progress.step is None:
        return None
    if progress.restart is not None and progress.restart > failed_gen:
        return None  # the status no longer holds the failed gang's last step
    return max(0, progress.step - (report.first_step - 1))


def _with_ratio(status: JobStatus, goodput: Goodput, now: float) -> Goodput:
    start = parse_iso(status.start_time)
    end = parse_iso(status.completion_time)
    if start is None:
        return goodput
    wall = (end.timestamp() if end is not None else now) - start.timestamp()
    lost = lost_seconds(goodput, status.progress.steps_per_second if status.progress else None, now)
    if wall <= 0 or lost is None:
        return replace(goodput, lost_seconds=lost)
    return replace(goodput, lost_seconds=lost, ratio=round(max(0.0, 1 - lost / wall), 4))


def lost_seconds(goodput: Goodput, steps_per_second: float | None, now: float) -> float | None:
    """Startup, recoveries (an open one counts to ``now``) and recomputed steps; None before startup
    is known (the job has not stepped yet: nothing to compare)."""
    if goodput.startup_seconds is None:
        return None
    lost = goodput.startup_seconds
    for entry in goodput.restarts or ():
        if entry.recover_seconds is not None:
            lost += entry.recover_seconds
        elif (failed := parse_iso(entry.failed_time)) is not None:
            lost += max(0.0, now - failed.timestamp())
        if entry.steps_recomputed and steps_per_second:
            lost += entry.steps_recomputed / steps_per_second
    return _sig(lost)


def _since_start(status: JobStatus, unix: float) -> float | None:
    start = parse_iso(status.start_time)
    return None if start is None else _sig(max(0.0, unix - start.timestamp()))


def _sig(value: float) -> float:
    return float(f"{value:.4g}")


def _iso(unix: float) -> str:
    return iso(datetime.fromtimestamp(unix, UTC))
