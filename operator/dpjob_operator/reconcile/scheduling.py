"""Scheduling policy: which PodGroup a generation belongs to, and what PodsScheduled says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dpjob_operator.api.names import pod_group_name
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.status import Gang
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import EnsureGang, Event
from dpjob_operator.reconcile.context import PassContext


def gang_of_generation(ctx: PassContext, current: Sequence[PodObservation]) -> str | None:
    """The PodGroup the ranks of the current generation belong to, or None: decided once per gang.

    A generation whose first ranks exist keeps what they have: a rank added to it later joins
    the same PodGroup, or none, whatever the operator or the job says now. Otherwise a group
    with minCount N could get fewer than N members (they would wait forever), or a gang's
    members could lose their PodGroup. A change (operator config, API enabled, the job's
    ``gangScheduling``) takes effect with the next generation.
    """
    existing = [p for p in current if not p.deleting]
    if existing:
        return next((p.pod_group for p in existing if p.pod_group), None)
    return pod_group_name(ctx.job.name, ctx.pod_generation) if ctx.gang is not None else None


def ensure_gang(ctx: PassContext, group: str | None) -> None:
    """Before the pods: the group must be whole before the scheduler can admit any of it."""
    if group is not None and ctx.gang is not None:
        ctx.actions.append(EnsureGang(ctx.pod_generation, ctx.gang.min_count))
        ctx.status = replace(ctx.status, gang=Gang(pod_group=group, min_count=ctx.gang.min_count))
    elif group is None:
        ctx.release_gang()


def report_scheduling(ctx: PassContext, live: Sequence[PodObservation]) -> None:
    """PodsScheduled: the gang's verdict, else the first unschedulable rank, else all bound."""
    unschedulable = [p for p in live if p.phase == "Pending" and p.unschedulable]
    verdict = ctx.gang.scheduled if ctx.gang is not None else None
    if ctx.gang is not None and verdict is not None and verdict.get("status") == "False" \
            and any(not p.node for p in live):
        msg = (f"the gang of {ctx.gang.min_count} rank(s) cannot be placed together, so no rank holds a node: "
               f"{verdict.get('message') or verdict.get('reason') or 'Unschedulable'}")
        if unschedulable:  # the PodGroup says that; the pod says why
            p = unschedulable[0]
            msg += f"; rank {p.index} (pod {p.name}): {p.unschedulable}"
        was = ctx.status.condition(r.PODS_SCHEDULED)
        if not was or was.reason != r.GANG_UNSCHEDULABLE:
            ctx.events.append(Event("Warning", r.GANG_UNSCHEDULABLE, msg))
        ctx.cond(r.PODS_SCHEDULED, False, r.GANG_UNSCHEDULABLE, msg)
    elif unschedulable:
        p = unschedulable[0]
        msg = f"rank {p.index} (pod {p.name}) cannot be scheduled: {p.unschedulable}"
        if ctx.status.is_true(r.PODS_SCHEDULED) or ctx.status.condition(r.PODS_SCHEDULED) is None:
            ctx.events.append(Event("Warning", r.UNSCHEDULABLE, msg))
        ctx.cond(r.PODS_SCHEDULED, False, r.UNSCHEDULABLE, msg)
    elif live and all(p.node for p in live):
        ctx.cond(r.PODS_SCHEDULED, True, r.SCHEDULED, "every rank pod is bound to a node")
