"""The reconcile decision for one job: observed state in, new status + actions + events out.

Pure and level-triggered: given the same job, status and observed pods it always decides the
same, so an operator restart (or a lost watch event) resumes without duplicating or losing a
pod. Crash safety rests on one rule: the gang generation lives in ``status.restarts`` and
every pod carries it in the ``dpjob.io/restart`` label; pods of another generation are stale
and get deleted. The executor writes the status *before* acting, so a decided restart is never
forgotten (a new job's first write, with no decision in it yet, goes beside the children a later
pass puts right: ``first_pass.py``).

``plan_job`` only orders the policies; each lives in its own module (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from dpjob_operator.api.labels import pod_selector
from dpjob_operator.api.observed import (
    GangObservation,
    KueueObservation,
    NodeView,
    PodObservation,
    RankTableOutcome,
)
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.progress import ProgressView
from dpjob_operator.api.spec import Job
from dpjob_operator.api.status import JobStatus
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import DeletePods, Event, Plan
from dpjob_operator.reconcile.claims import claimed
from dpjob_operator.reconcile.cleanup import finish, ttl_due
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.converge import converge
from dpjob_operator.reconcile.deadline import deadline_due, deadline_exceeded
from dpjob_operator.reconcile.failure import fail_job, handle_failures
from dpjob_operator.reconcile.goodput import account_goodput
from dpjob_operator.reconcile.inplace import account_in_place, decide_strategy, fall_back_to_recreate
from dpjob_operator.reconcile.kueue_gate import gate_on_kueue
from dpjob_operator.reconcile.kueue_sync import sync_workload
from dpjob_operator.reconcile.node_loss import apply_node_loss, settle_node_loss
from dpjob_operator.reconcile.pool import pool_missing
from dpjob_operator.reconcile.progress import apply_progress
from dpjob_operator.reconcile.refusals import recover_fixed_spec
from dpjob_operator.reconcile.stall import apply_stall, settle_stall
from dpjob_operator.reconcile.stuck import report_stuck
from dpjob_operator.reconcile.success import apply_success
from dpjob_operator.reconcile.suspend import apply_suspend
from dpjob_operator.reconcile.waiting import report_waiting
from dpjob_operator.reconcile.warm_restarts import account_warm


def plan_job(job: Job, status: Mapping[str, Any], pods: Sequence[PodObservation], now: datetime,
             pool: PoolConfig | None, rank_table: RankTableOutcome | None = None,
             gang: GangObservation | None = None, progress: ProgressView | None = None,
             nodes: NodeView | None = None, in_place_served: bool = False,
             kueue: KueueObservation | None = None) -> Plan:
    """Decide what to do for ``job`` now. See the module docstring for the invariants.

    ``gang`` is None when the ranks are scheduled one by one (the cluster has no gang API, the
    operator or the job disabled it). ``progress``: what rank 0 last reported (None: not read).
    ``nodes``: the health of the nodes of pods stuck Terminating, of failed ranks and of the current
    gang (None: not looked at).
    ``in_place_served``: the cluster keeps restart rules and the operator allows them (reconcile/inplace.py).
    ``kueue``: the job's Kueue Workload, when Kueue queues the job (reconcile/kueue_gate.py).
    """
    fixed = recover_fixed_spec(status)
    ctx = PassContext(job, status if fixed is None else fixed, now, gang, nodes)
    if fixed is not None:
        ctx.events.append(Event("Normal", r.SPEC_FIXED, "the spec is valid now: starting the job"))
    ours, foreign = claimed(job.uid, pods)
    current = sorted((p for p in ours if p.restart == ctx.pod_generation), key=lambda p: (p.index, p.name))
    _bookkeeping(ctx, ours, current)
    decide_strategy(ctx, in_place_served)
    phase = ctx.status.phase
    if phase in r.TERMINAL:
        finish(ctx, current, str(phase))
    elif pool_missing(ctx, pool) or apply_suspend(ctx, current) or gate_on_kueue(ctx, current, ours, pool, kueue):
        pass
    elif (late := _start(ctx)) is not None:
        fail_job(ctx, current, r.DEADLINE_EXCEEDED, late)
    elif (apply_node_loss(ctx, current) or fall_back_to_recreate(ctx, current) or account_in_place(ctx, current)
          or account_warm(ctx, current, progress) or handle_failures(ctx, current) or apply_success(ctx, current)
          or apply_stall(ctx, current, progress)):
        pass
    else:
        converge(ctx, current, pods, rank_table, foreign)
    report_stuck(ctx, ours, nodes)
    sync_workload(ctx, ours, current, kueue)
    if phase not in r.TERMINAL:
        settle_stall(ctx)
        settle_node_loss(ctx)
        report_waiting(ctx, current)
        apply_progress(ctx, progress)  # last: a pass that writes anyway takes the progress along
        account_goodput(ctx, progress)
    return ctx.plan()


def _bookkeeping(ctx: PassContext, ours: Sequence[PodObservation], current: Sequence[PodObservation]) -> None:
    """Fields every pass writes, and the deletion of our pods of another gang generation."""
    job = ctx.job
    ctx.status = replace(ctx.status, observed_generation=job.generation, world_size=job.spec.world_size,
                         selector=pod_selector(job), restarts=ctx.status.restarts or 0,
                         failure_restarts=ctx.status.failure_restarts or 0)
    ctx.count(current)
    stale = [p.name for p in ours if p.restart != ctx.pod_generation and not p.deleting]
    if stale:
        ctx.actions.append(DeletePods(tuple(stale), r.STALE_GENERATION))


def _start(ctx: PassContext) -> str | None:
    """Start the clock and the first phase; the deadline message once the run is out of time."""
    if ctx.status.start_time is None:
        ctx.status = replace(ctx.status, start_time=ctx.now_s)
    if ctx.status.phase is None:
        spec = ctx.job.spec
        ctx.phase(r.PENDING, r.ACCEPTED, f"creating {spec.replicas} rank pod(s), world size {spec.world_size}")
        ctx.cond(r.CREATED, False, r.CREATING, "rank pods are being created")
    return deadline_exceeded(ctx.job, ctx.status, ctx.now)


def next_wakeup(job: Job, status: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until a time-based decision (deadline or TTL) is due, if any."""
    typed = JobStatus.from_dict(status)
    due = [t for t in (deadline_due(job, typed), ttl_due(job, typed)) if t is not None]
    if not due:
        return None
    return max(0.0, (min(due) - now).total_seconds())


def look_again_in(job: Job, plan: Plan, now: datetime, resync_seconds: float) -> float:
    """Seconds until the job is looked at again unprompted: the earliest of the resync period, a
    time-based decision (deadline, TTL) and a policy's own ``wake_after``. Everything else the
    operator waits for (pods, the scheduler's gang verdicts) is watched and queues a pass itself."""
    due = [resync_seconds]
    due += [wake + 0.05 for wake in (next_wakeup(job, plan.status, now), plan.wake_after) if wake is not None]
    return min(due)
