"""Kueue policy, second half: what the operator writes to the job's Workload, as Kueue's job framework
does for its own kinds (each patch is made by builders/kueue_status.py).

At most one write per pass: every patch carries the resourceVersion of the Workload it was made from,
so a second one would only meet a 409. The watch brings the written Workload back and queues a pass,
which writes the next. In order:

1. the job finished: ``Finished=True`` (Succeeded, Failed or FailedToStart: Kueue releases the quota);
2. the job finished, or the Workload is being deleted (by its owner's deletion, or by someone), and no
   rank pod of the job holds resources any more: drop Kueue's ``resource-in-use`` finalizer;
3. evicted while holding quota, and no rank pod holds resources: give the quota back (``Requeued``,
   ``QuotaReserved=False``): Kueue then admits the job again, when and where it can;
4. the job's suspension: ``spec.active`` false while suspended, true again on resume;
5. admitted and running: ``PodsReady``, whose timeout Kueue's waitForPodsReady enforces.

``orphan_finalizer_patch`` is step 2 for a Workload whose job is gone (deleted with its pods still
terminating): the controller applies it, since no pass runs for a job that no longer exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpjob_operator.api import kueue as k
from dpjob_operator.api.observed import KueueObservation, PodObservation
from dpjob_operator.builders.kueue_status import (
    activation_patch,
    finalizer_patch,
    finish_patch,
    pods_ready_patch,
    requeue_patch,
)
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import PatchKueueWorkload
from dpjob_operator.reconcile.context import PassContext

Write = tuple[dict[str, Any], bool, str]   # (merge patch, of the status subresource, why)


def sync_workload(ctx: PassContext, ours: Sequence[PodObservation], current: Sequence[PodObservation],
                  kueue: KueueObservation | None) -> None:
    """The pass's one write to the job's Workload, if it needs one. ``ours``: every pod the job
    controls (any generation); ``current``: this generation's."""
    if kueue is None or kueue.workload is None or kueue.state is None:
        return
    write = _next_write(ctx, ours, current, kueue.workload, kueue.state)
    if write is not None:
        ctx.actions.append(PatchKueueWorkload(kueue.workload_name, *write))


def _finish(ctx: PassContext) -> tuple[str, str]:
    """The Finished condition's (reason, message) for the job's terminal phase."""
    if ctx.status.phase == r.SUCCEEDED:
        return k.FINISHED_SUCCEEDED, ctx.status.message or "the job succeeded"
    reason = k.FAILED_TO_START if ctx.status.reason == r.FAILED_TO_START else k.FINISHED_FAILED
    return reason, ctx.status.message or "the job failed"


def _next_write(ctx: PassContext, ours: Sequence[PodObservation], current: Sequence[PodObservation],
                workload: Mapping[str, Any], state: k.WorkloadState) -> Write | None:
    idle = not any(p.holds_resources for p in ours)
    finished = ctx.status.phase in r.TERMINAL
    if finished and state.finished is None:
        patch = finish_patch(workload, *_finish(ctx), ctx.now)
        return (patch, True, "finished") if patch is not None else None
    if (finished or state.deleting) and idle:
        patch = finalizer_patch(workload)
        return (patch, False, "released") if patch is not None else None
    if finished or state.deleting:
        return None
    if state.evicted is not None and idle and (patch := requeue_patch(workload, ctx.now)) is not None:
        return patch, True, "requeued"
    if (patch := activation_patch(workload, ctx.job.spec.run_policy.suspend)) is not None:
        return patch, False, "suspended" if ctx.job.spec.run_policy.suspend else "resumed"
    if ctx.admission is not None and state.admitted and state.evicted is None:
        patch = pods_ready_patch(workload, _pods_ready(ctx, current), ctx.now)
        return (patch, True, "pods ready") if patch is not None else None
    return None


def _pods_ready(ctx: PassContext, current: Sequence[PodObservation]) -> bool:
    """Every rank Ready, or done (Kueue's rule for a batch Job: ready + succeeded >= parallelism)."""
    done = [p for p in current if not p.deleting and ((p.phase == "Running" and p.ready) or p.phase == "Succeeded")]
    return len({p.index for p in done}) >= ctx.job.spec.replicas


def orphan_finalizer_patch(workload: Mapping[str, Any], pods: Sequence[PodObservation]) -> dict[str, Any] | None:
    """The finalizer patch of a Workload being deleted whose job is gone, once no pod of that job
    (its controller uid) holds resources; None: not yet, or nothing to drop."""
    state = k.parse_workload(workload)
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    owner = next((str(ref.get("uid")) for ref in refs if ref.get("controller")), None)
    if not state.deleting or any(p.holds_resources for p in pods if p.owner_uid == owner):
        return None
    return finalizer_patch(workload)
