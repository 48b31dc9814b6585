"""Suspend policy: no pods while suspended; the clock restarts on resume. A job Kueue queues also
deactivates its Workload meanwhile, so that it holds no quota (reconcile/kueue_sync.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import DeletePods, Event
from dpjob_operator.reconcile.context import PassContext


def apply_suspend(ctx: PassContext, current: Sequence[PodObservation]) -> bool:
    """True when the job is suspended (the pass ends here); records a resume otherwise."""
    if ctx.job.spec.run_policy.suspend:
        active = [p.name for p in current if not p.deleting]
        if active:
            ctx.actions.append(DeletePods(tuple(active), r.SUSPENDED))
        ctx.release_gang()
        ctx.cond(r.SUSPENDED, True, r.SUSPENDED, "the job is suspended: rank pods are deleted")
        ctx.phase(r.SUSPENDED, r.SUSPENDED, "the job is suspended (spec.runPolicy.suspend)")
        # startTime restarts on resume, so activeDeadlineSeconds counts running time only.
        ctx.status = replace(ctx.status, start_time=None)
        return True
    if ctx.status.is_true(r.SUSPENDED):
        ctx.cond(r.SUSPENDED, False, r.RESUMED, "the job was resumed")
        ctx.events.append(Event("Normal", r.RESUMED, "the job was resumed: recreating the rank pods"))
    return False
