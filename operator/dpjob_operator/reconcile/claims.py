"""Claims: a job acts only on pods it controls, by owner UID, never by name or label alone.

Labels and names are not identity. After ``kubectl delete`` and re-apply of a job with the same
name, the old incarnation's pods (same names, same labels) may still be terminating; a pod
someone created by hand may carry our labels. The Kubernetes Job controller claims by the
controller ownerReference's UID and never adopts an orphan; so do we. A foreign pod is never
counted, never deleted, never restarted: it only blocks the rank whose name it holds, and the
job says so (condition ``Created=False/PodNameConflict`` and one Warning event).
"""

from __future__ import annotations

from collections.abc import Sequence

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.conditions import get_condition
from dpjob_operator.reconcile.context import PassContext


def claimed(job_uid: str, pods: Sequence[PodObservation]) -> tuple[list[PodObservation], list[PodObservation]]:
    """(ours, foreign): ours are the pods whose controller is the job with ``job_uid``."""
    ours = [p for p in pods if p.owner_uid == job_uid]
    return ours, [p for p in pods if p.owner_uid != job_uid]


def report_blocked(ctx: PassContext, foreign: Sequence[PodObservation], missing: Sequence[int]) -> None:
    """Name the foreign pods that hold the names of ranks we must create."""
    wanted = {f"{ctx.job.name}-rank-{i}" for i in missing}
    blocking = [p for p in foreign if p.name in wanted]
    if not blocking:
        return
    p = blocking[0]
    if p.deleting:
        message = (f"waiting for pod {p.name} (owned by {p.owner_uid or 'nobody'}, e.g. a previous job of this "
                   f"name) to finish terminating before creating rank {p.index}")
    else:
        message = (f"pod {p.name} exists but is not controlled by this job (controller uid "
                   f"{p.owner_uid or 'none'}); delete it or rename the job: the operator never adopts a pod")
    was = get_condition(ctx.conditions, r.CREATED)
    if not p.deleting and (not was or was.get("reason") != r.POD_NAME_CONFLICT):
        ctx.events.append(Event("Warning", r.POD_NAME_CONFLICT, message))
    ctx.cond(r.CREATED, False, r.POD_NAME_CONFLICT, message)
    ctx.status["message"] = message
