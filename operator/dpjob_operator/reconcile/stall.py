"""Stall watchdog: a Running gang that stops stepping is caught in ``stallTimeoutSeconds``, not in the
30 minutes of an NCCL timeout.

Two clocks, both on the current gang only, both opt-in (``spec.runPolicy``):

- ``stallTimeoutSeconds``: from the last step rank 0 reported. It starts at the first step, so
  a slow rendezvous or a long data load is never a stall;
- ``startupTimeoutSeconds``: from all ranks running to the first step ("never reached step 1").

Either clock also starts no earlier than this operator began reading rank 0 (``ProgressView``):
after an operator restart, a step time written minutes ago is not evidence of a stall.

When one runs out: condition ``Stalled=True`` (reason ``Stalled`` or ``StartupTimeout``), a
Warning event, ``status.lastStall``, then ``stallPolicy``: ``Restart`` restarts the gang (it
resumes from its checkpoint), ``Fail`` fails the job, ``None`` only reports. A Restart is not
charged to ``backoffLimit`` while the job gets further than at its previous stall; one that stalls
again without passing that step is charged, so a job that hangs at the same place every time ends
as Failed/BackoffLimitExceeded instead of restarting forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.progress import ProgressView
from dpjob_operator.api.status import LastStall
from dpjob_operator.api.timestamps import iso, parse_iso
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.failure import fail_job, restart_gang


@dataclass(frozen=True)
class Stall:
    reason: str        # Stalled | StartupTimeout
    message: str
    step: int | None   # the last step of the gang; None: it never reported one


def apply_stall(ctx: PassContext, current: Sequence[PodObservation], view: ProgressView | None) -> bool:
    """True when the watchdog restarted or failed the job in this pass."""
    policy = ctx.job.spec.run_policy
    if ctx.status.phase != r.RUNNING or not (policy.stall_timeout_seconds or policy.startup_timeout_seconds):
        return False
    stall = find_stall(ctx, view)
    if stall is None:
        return False
    return _act(ctx, current, stall)


def last_step(ctx: PassContext, view: ProgressView | None) -> tuple[int, datetime] | None:
    """The current gang's last step and its time: from the latest read, else from the status."""
    found: list[tuple[int, datetime]] = []
    if view is not None and view.restart == ctx.generation and view.latest is not None:
        found.append((view.latest.step, datetime.fromtimestamp(view.latest.last_step_time, UTC)))
    written = ctx.old.progress
    at = parse_iso(written.last_step_time) if written is not None else None
    if written is not None and written.restart == ctx.generation and at is not None and written.step:
        found.append((written.step, at))
    return max(found, key=lambda pair: pair[1]) if found else None


def find_stall(ctx: PassContext, view: ProgressView | None) -> Stall | None:
    """The stall of the current gang, if a clock ran out; else None, with a wakeup at the deadline."""
    if view is None or view.restart != ctx.generation:
        return None  # rank 0 of this gang is not being read (yet): nothing to judge by
    policy = ctx.job.spec.run_policy
    watching = datetime.fromtimestamp(view.watching_since, UTC)
    last = last_step(ctx, view)
    if last is None:
        timeout, since = policy.startup_timeout_seconds, _running_since(ctx)
        if not timeout or since is None:
            return None
        stall = Stall(r.STARTUP_TIMEOUT, f"no rank reported a first step within startupTimeoutSeconds={timeout} "
                                         f"of all ranks running ({iso(since)})", None)
    else:
        (step, since), timeout = last, policy.stall_timeout_seconds
        if not timeout:
            return None
        _clear(ctx, step, since)
        silent = int((ctx.now - since).total_seconds())
        stall = Stall(r.STALLED, f"no step for {silent}s since step {step} at {iso(since)} "
                                 f"(stallTimeoutSeconds={timeout})", step)
    deadline = max(since, watching) + timedelta(seconds=timeout)
    if ctx.now < deadline:
        ctx.wake_within((deadline - ctx.now).total_seconds())
        return None
    return stall


def settle_stall(ctx: PassContext) -> None:
    """A job that succeeded is not stalled, even when its restarted gang finished between two reads."""
    if ctx.status.phase == r.SUCCEEDED and ctx.status.is_true(r.STALLED):
        ctx.cond(r.STALLED, False, r.JOB_SUCCEEDED, "the job succeeded")


def _running_since(ctx: PassContext) -> datetime | None:
    """When the current gang's ranks were all running (the Running condition's transition)."""
    cond = ctx.status.condition(r.RUNNING)
    if cond is None or cond.status != "True":
        return None
    return parse_iso(cond.last_transition_time)


def _clear(ctx: PassContext, step: int, at: datetime) -> None:
    """Steps are coming again (after a stall reported with stallPolicy None, or in the restarted gang)."""
    timeout = timedelta(seconds=ctx.job.spec.run_policy.stall_timeout_seconds or 0)
    if ctx.status.is_true(r.STALLED) and ctx.now - at < timeout:
        ctx.cond(r.STALLED, False, r.PROGRESSING, f"step {step} reported at {iso(at)}")


def _act(ctx: PassContext, current: Sequence[PodObservation], stall: Stall) -> bool:
    """Report the stall once, then carry out ``stallPolicy``."""
    previous = ctx.status.last_stall or LastStall()
    if (previous.restart, previous.reason, previous.step) == (ctx.generation, stall.reason, stall.step):
        return False  # reported already (stallPolicy None): nothing new to say
    record = LastStall(reason=stall.reason, step=stall.step, restart=ctx.generation, time=ctx.now_s,
                       message=stall.message)
    ctx.status = replace(ctx.status, last_stall=record)
    ctx.cond(r.STALLED, True, stall.reason, stall.message)
    policy = ctx.job.spec.run_policy
    if policy.stall_policy == "Fail":
        fail_job(ctx, current, stall.reason, stall.message)  # its phase event is the Warning
        return True
    ctx.events.append(Event("Warning", stall.reason, stall.message))
    if policy.stall_policy != "Restart":
        return False
    _restart(ctx, current, stall, previous)
    return True


def _restart(ctx: PassContext, current: Sequence[PodObservation], stall: Stall, previous: LastStall) -> None:
    """A gang restart, charged to backoffLimit only when no step past the previous stall's was made."""
    policy = ctx.job.spec.run_policy
    before = previous.step
    charged = previous != LastStall() and (stall.step or 0) <= (before or 0)
    failures = ctx.status.failure_restarts or 0
    if charged and failures >= policy.backoff_limit:
        fail_job(ctx, current, r.BACKOFF_LIMIT_EXCEEDED,
                 f"{stall.message}; stalled again without passing step {before} of the previous stall, and "
                 f"backoffLimit {policy.backoff_limit} is reached after {failures} gang restart(s)")
        return
    note = "charged to backoffLimit: no step past the previous stall's" if charged else "not charged to backoffLimit"
    restart_gang(ctx, current, stall.reason, charged, f"{stall.message}; restarting the gang ({note})")
