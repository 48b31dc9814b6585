"""Warm restarts: the books of the restarts a trainer's supervisor makes inside its containers (pure).

With ``InPlace`` the built-in trainer replaces a training process that ended with a retriable exit
inside the running container, torch already loaded (trainer ``warm.py``); every rank does the same,
so the gang re-forms in about a second with no pod, container or kubelet involved. The pods show
nothing of it: the operator learns it from rank 0's progress report, which says how many warm
restarts rank 0's container made in this gang generation, and which rank failed first with which
exit code before the last one; and, for a job that ends before the next read, from the same facts
in rank 0's termination message (api/warm_record.py).

Each warm restart is charged to ``backoffLimit`` like any failure restart (``failureRestarts``,
``restartsByReason.RankFailed``, ``restartsByStrategy.Warm``), names its culprit in
``lastFailure`` and gets a ``status.goodput`` entry with its real recovery time (the failed
process's end to the new gang's first step, both from the trainer's clock). ``status.restarts``
stays the pod generation: a warm restart leaves the pods as they are. When the budget is spent the
job fails and its pods are stopped; between two reads the supervisors hold themselves to
``backoffLimit`` restarts per container.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from dpjob_operator.api.names import rank_pod_name
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.progress import ProgressReport, ProgressView
from dpjob_operator.api.status import Goodput, GoodputRestart, LastFailure, LastRestart
from dpjob_operator.api.timestamps import iso
from dpjob_operator.api.warm_record import report_from_record
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.failure import fail_job
from dpjob_operator.reconcile.goodput import MAX_RESTARTS, WARM
from dpjob_operator.reconcile.inplace import added


def booked(ctx: PassContext) -> int:
    """Warm restarts of the current gang generation already in the books."""
    last = ctx.status.last_restart
    if last is None or last.strategy != WARM or last.restart != ctx.generation:
        return 0
    return last.warm_restarts or 0


def account_warm(ctx: PassContext, current: Sequence[PodObservation],
                 view: ProgressView | None) -> bool:
    """Book the warm restarts rank 0 reported and the books lack; True when that failed the job."""
    report = _latest(ctx, current, view)
    if report is None:
        return False
    new = (report.warm_restarts or 0) - booked(ctx)
    if new <= 0:
        return False
    failure = _failure(ctx, current, report)
    ctx.status = replace(ctx.status, last_failure=failure)
    ctx.events.append(Event("Warning", r.RANK_FAILED, _describe(failure)))
    policy, spent = ctx.job.spec.run_policy, ctx.status.failure_restarts or 0
    if spent + new > policy.backoff_limit:
        fail_job(ctx, current, r.BACKOFF_LIMIT_EXCEEDED,
                 f"a rank's training process was restarted warm; backoffLimit {policy.backoff_limit} reached "
                 f"after {spent} gang restart(s)")
        return True
    ctx.status = replace(
        ctx.status, failure_restarts=spent + new,
        restarts_by_reason=added(ctx.status.restarts_by_reason, r.RANK_FAILED, new),
        restarts_by_strategy=added(ctx.status.restarts_by_strategy, WARM, new),
        last_restart=LastRestart(restart=ctx.generation, strategy=WARM, reason=r.RANK_FAILED, time=ctx.now_s,
                                 warm_restarts=report.warm_restarts),
        goodput=_with_entry(ctx, report))
    ctx.events.append(Event("Warning", r.GANG_RESTART,
                            f"every rank restarted warm in its container ({_describe(failure)}; failure restart "
                            f"{spent + new} of backoffLimit {policy.backoff_limit})"))
    return False


def _latest(ctx: PassContext, current: Sequence[PodObservation], view: ProgressView | None) -> ProgressReport | None:
    """What rank 0 said last of this generation's warm restarts: its metrics, or, once it ended
    cleanly, its termination message (a job that ends within one read of a warm restart)."""
    read = view.latest if view is not None and view.restart == ctx.generation else None
    rank0 = next((p for p in current if p.index == 0 and p.phase == "Succeeded"), None)
    ended = report_from_record(rank0.message, ctx.generation, ctx.now.timestamp()) if rank0 is not None else None
    if ended is not None and (read is None or (ended.warm_restarts or 0) > (read.warm_restarts or 0)):
        return ended
    return read


def _failure(ctx: PassContext, current: Sequence[PodObservation],
             report: ProgressReport) -> LastFailure:
    rank = report.warm_rank if report.warm_rank is not None else -1
    pod = next((p for p in current if p.index == rank), None)
    code = report.warm_exit_code if report.warm_exit_code is not None else -1
    ended = None if report.warm_failed_time is None else iso(datetime.fromtimestamp(report.warm_failed_time, UTC))
    return LastFailure(rank=rank, pod=rank_pod_name(ctx.job.name, rank) if rank >= 0 else "",
                       node=(pod.node or "") if pod is not None else "", container="trainer", exit_code=code,
                       reason=r.RANK_FAILED, message="the training process ended; restarted warm in its container",
                       restart=ctx.generation, time=ctx.now_s, finished_time=ended)


def _describe(failure: LastFailure) -> str:
    who = f"rank {failure.rank}" if (failure.rank or 0) >= 0 else "a rank"
    code = "an unknown exit code" if failure.exit_code is None or failure.exit_code < 0 \
        else f"exit code {failure.exit_code}"
    return f"{who}'s training process ended with {code}"


def _with_entry(ctx: PassContext, report: ProgressReport) -> Goodput | None:
    """The restart's cost, complete at once: the failed process's end to the new gang's first step."""
    goodput = ctx.status.goodput or Goodput()
    failed, stepped = report.warm_failed_time, report.first_step_time
    if failed is None:
        return ctx.status.goodput
    recover = None if stepped is None else float(f"{max(0.0, stepped - failed):.4g}")
    progress = ctx.old.progress
    recomputed = None
    if report.first_step is not None and progress is not None and progress.step is not None \
            and progress.restart == ctx.generation:
        recomputed = max(0, progress.step - (report.first_step - 1))
    entry = GoodputRestart(restart=ctx.generation, strategy=WARM, reason=r.RANK_FAILED,
                           failed_time=iso(datetime.fromtimestamp(failed, UTC)), detect_seconds=0.0,
                           recover_seconds=recover, steps_recomputed=recomputed)
    return replace(goodput, restarts=(*(goodput.restarts or ()), entry)[-MAX_RESTARTS:])
