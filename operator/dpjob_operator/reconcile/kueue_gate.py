"""Kueue policy: the rank pods run only while Kueue admits the job's Workload (docs/kueue.md).

Kueue v0.17 treats DataParallelJob as an external framework: the operator is the job framework. It
makes the job's Workload, and each pass reads Kueue's verdict on it (``kueue_admission``):

* Wait: no rank pod; phase ``Queued`` (reason Queued, or Evicted after an eviction) and condition
  ``Admitted=False`` with Kueue's reason and message; the activeDeadlineSeconds clock stands still.
* Run: ``Admitted=True`` (an ``Admitted`` Event on the transition) and the rest of the pass goes on as
  without Kueue; the pods it creates carry the admission's placement (``PassContext.admission``).
* Stop: an eviction (preemption, PodsReady timeout, a stopped queue, a deactivation) deletes the whole
  gang, not charged to backoffLimit: like a suspension, the job resumes from its checkpoint once
  admitted again (``kueue_sync`` gives the quota back once no rank pod is left). A Workload someone
  deleted stops the gang too, and a new one is queued. An admission that cannot be applied to the
  pods (FailedToStart), or a Workload marked finished under a running job, fails the job.

A Workload that no longer describes the job (its ranks or their requests changed: a resize; or, while it
holds no quota, its LocalQueue label) is replaced, never edited: Kueue keeps a Workload's podSets
immutable while it holds quota. A job resized while admitted therefore stops and is queued anew.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dpjob_operator.api import kueue as k
from dpjob_operator.api.observed import KueueObservation, PodObservation
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.status import Kueue
from dpjob_operator.builders.kueue_status import finalizer_patch
from dpjob_operator.builders.kueue_workload import build_workload, workload_matches
from dpjob_operator.builders.pods import rank_node_selector
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import (
    DeleteKueueWorkload,
    DeletePods,
    EnsureKueueWorkload,
    Event,
    PatchKueueWorkload,
)
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.failure import fail_job
from dpjob_operator.reconcile.kueue_admission import MissingFlavor, Run, Stop, Wait, admission_decision

# Why the executor could not make the Workload (controller/child_failures.py), reported once.
_CANNOT_CREATE = (r.KUEUE_WORKLOAD_NAME_CONFLICT, r.PRIORITY_CLASS_NOT_FOUND)


def gate_on_kueue(ctx: PassContext, current: Sequence[PodObservation], ours: Sequence[PodObservation],
                  pool: PoolConfig | None, kueue: KueueObservation | None) -> bool:
    """True when Kueue keeps the gang down this pass (the pass ends here); False: run as usual.
    ``ours``: every pod the job controls (any generation); ``current``: this generation's."""
    if kueue is None or pool is None:
        if kueue is None and ctx.status.kueue is not None:
            ctx.status = replace(ctx.status, kueue=None)
        return False
    queue = k.queue_name(ctx.job.labels)
    state = kueue.state if kueue.workload is not None else None
    _record(ctx, kueue, state, queue)
    if state is None:
        if queue is None:
            return False  # no queue label and no Workload left: the job is not Kueue's any more
        ctx.actions.append(EnsureKueueWorkload())
        reason, message = r.QUEUED, f"creating Workload {kueue.workload_name} in LocalQueue {queue!r}"
        was = ctx.status.condition(r.ADMITTED)
        if was is not None and was.reason in _CANNOT_CREATE:  # the executor's report stands until it is made
            reason, message = str(was.reason), str(was.message)
        _queue(ctx, current, reason, message)
        return True
    assert kueue.workload is not None
    stale = _outdated(ctx, pool, kueue, state, queue)
    if stale is not None:
        _replace(ctx, current, ours, kueue, stale)
        return True
    return _obey(ctx, current, kueue, state, pool)


def _obey(ctx: PassContext, current: Sequence[PodObservation], kueue: KueueObservation, state: k.WorkloadState,
          pool: PoolConfig) -> bool:
    decision = admission_decision(state, kueue.flavors, rank_node_selector(ctx.job, pool))
    if isinstance(decision, MissingFlavor):
        # Not a verdict on the job: keep what runs, start nothing, say why (the next pass reads it again).
        message = f"ResourceFlavor {decision.name!r} of the admission cannot be read; waiting for it"
        if any(not p.deleting for p in current):
            ctx.cond(r.ADMITTED, False, r.RESOURCE_FLAVOR_NOT_FOUND, message)
        else:
            _queue(ctx, current, r.RESOURCE_FLAVOR_NOT_FOUND, message)
        return True
    if isinstance(decision, Wait):
        _queue(ctx, current, decision.reason, decision.message, evicted=_evicted(state))
        return True
    if isinstance(decision, Run):
        _admitted(ctx, state, decision)
        return False
    _stop(ctx, current, decision)
    return True


def _evicted(state: k.WorkloadState) -> bool:
    """Evicted, and not since made active again: a Workload deactivated for a suspension (or by Kueue)
    and then reactivated keeps Evicted=True until readmitted, but is just queued again."""
    requeued = state.requeued
    reactivated = requeued is not None and requeued.status and requeued.reason == k.REQUEUED_BY_REACTIVATION
    return state.evicted is not None and not reactivated


def _record(ctx: PassContext, kueue: KueueObservation, state: k.WorkloadState | None, queue: str | None) -> None:
    """status.kueue: the Workload, its queue and, while it holds quota, where."""
    reserved = state is not None and state.quota_reserved
    flavors = tuple(sorted({name for ps in state.pod_sets for name in ps.flavor_names})) if state and reserved else ()
    old = ctx.status.kueue or Kueue()
    ctx.status = replace(ctx.status, kueue=Kueue(
        workload=kueue.workload_name, queue=queue or (state.queue_name if state else None) or None,
        cluster_queue=state.cluster_queue if state and reserved else None, flavors=flavors or None,
        evictions=old.evictions))


def _delete_gang(ctx: PassContext, current: Sequence[PodObservation], reason: str) -> None:
    active = [p.name for p in current if not p.deleting]
    if active:
        ctx.actions.append(DeletePods(tuple(active), reason))
    ctx.release_gang()


def _queue(ctx: PassContext, current: Sequence[PodObservation], reason: str, message: str,
           evicted: bool = False) -> None:
    """No rank pod while not admitted; phase Queued, Admitted=False with Kueue's reason and words. An
    eviction is counted, and announced by a Warning, once: when the phase becomes Queued/Evicted."""
    phase_reason = r.EVICTED if evicted else r.QUEUED
    _delete_gang(ctx, current, phase_reason)
    ctx.cond(r.ADMITTED, False, reason, message)
    if evicted and (ctx.status.phase, ctx.status.reason) != (r.QUEUED, r.EVICTED):
        kueue = ctx.status.kueue or Kueue()
        ctx.status = replace(ctx.status, kueue=replace(kueue, evictions=(kueue.evictions or 0) + 1))
    ctx.phase(r.QUEUED, phase_reason, message, "Warning" if evicted else "Normal")
    # startTime restarts on admission, so activeDeadlineSeconds counts running time only (as a suspension).
    ctx.status = replace(ctx.status, start_time=None)


def _admitted(ctx: PassContext, state: k.WorkloadState, run: Run) -> None:
    ctx.admission = run.placement
    flavors = ", ".join(sorted({name for ps in state.pod_sets for name in ps.flavor_names})) or "none"
    message = f"admitted by ClusterQueue {state.cluster_queue} (ResourceFlavors: {flavors})"
    if not ctx.status.is_true(r.ADMITTED):
        ctx.events.append(Event("Normal", r.ADMITTED, f"{message}: starting {ctx.job.spec.replicas} rank pod(s)"))
    ctx.cond(r.ADMITTED, True, r.ADMITTED, message)


def _stop(ctx: PassContext, current: Sequence[PodObservation], stop: Stop) -> None:
    """Evicted or its Workload deleted: down, queued again. Unstartable or finished: Failed."""
    if stop.requeue:
        _queue(ctx, current, stop.reason, f"evicted by Kueue ({stop.reason}: {stop.message}): the rank pods "
                                          "are deleted; the job resumes when admitted again", evicted=True)
    elif stop.reason == r.WORKLOAD_DELETED:
        _queue(ctx, current, r.WORKLOAD_DELETED, "the Workload was deleted: the rank pods are deleted and a new "
                                                 "Workload is queued once they are gone")
    else:
        reason = r.FAILED_TO_START if stop.reason == k.FAILED_TO_START else r.WORKLOAD_FINISHED
        message = stop.message if reason == r.FAILED_TO_START else (
            f"Kueue marked the Workload finished ({stop.reason}: {stop.message})")
        ctx.cond(r.ADMITTED, False, reason, message)
        fail_job(ctx, current, reason, message)


def _outdated(ctx: PassContext, pool: PoolConfig, kueue: KueueObservation, state: k.WorkloadState,
              queue: str | None) -> str | None:
    """Why the Workload no longer describes the job, or None (a Workload being deleted is left to go)."""
    assert kueue.workload is not None
    if state.deleting or state.finished is not None:
        return None
    if not workload_matches(kueue.workload, build_workload(ctx.job, pool)):
        return (f"the job's ranks or their requests changed (spec.replicas {ctx.job.spec.replicas}): its Workload "
                "is replaced and queued anew")
    if queue != (state.queue_name or None) and not state.quota_reserved:
        return (f"the job's LocalQueue changed to {queue!r}: its Workload is replaced" if queue else
                "the job's kueue.x-k8s.io/queue-name label was removed: its Workload is deleted")
    return None


def _replace(ctx: PassContext, current: Sequence[PodObservation], ours: Sequence[PodObservation],
             kueue: KueueObservation, why: str) -> None:
    """Stop the gang; once no pod holds resources, drop the finalizer and delete the Workload (the next
    pass makes the new one)."""
    assert kueue.workload is not None
    _queue(ctx, current, r.WORKLOAD_CHANGED, why)
    if any(p.holds_resources for p in ours):
        return
    patch = finalizer_patch(kueue.workload)
    if patch is not None:
        ctx.actions.append(PatchKueueWorkload(kueue.workload_name, patch, False, "replaced"))
    ctx.actions.append(DeleteKueueWorkload(kueue.workload_name, why))
