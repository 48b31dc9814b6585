"""Claims: a job acts only on pods it controls, by owner UID, never by name or label alone.

Labels and names are not identity. After ``kubectl delete`` and re-apply of a job with the same
name, the old incarnation's pods (same names, same labels) may still be terminating; a pod
someone created by hand may carry our labels. The Kubernetes Job controller claims by the
controller ownerReference's UID and never adopts an orphan; so do we. A foreign pod is never
counted, never deleted, never restarted: it only blocks the rank whose name it holds, and the
job says so (condition ``Created=False/PodNameConflict`` and one Warning event). The same rule
holds for the job's Service and rank-table ConfigMaps (``ownership``): the executor never patches
one it does not control, and reports ``ServiceNameConflict`` / ``ConfigMapNameConflict``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpjob_operator.api.constants import KIND
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext

OURS, PREVIOUS, FOREIGN = "ours", "previous", "foreign"


def ownership(meta: Mapping[str, Any], job_uid: str, job_name: str) -> str:
    """Whose child object is this (a Service, a rank-table ConfigMap, a pod)? By controller UID.

    ``PREVIOUS``: controlled by an earlier job of the same name (deleted and re-applied): the
    garbage collector is about to delete it, so wait, silently. ``FOREIGN``: anyone else's, or
    nobody's: never adopted, never patched, and the user is told which object blocks the job.
    """
    refs = meta.get("ownerReferences") or []
    controller = next((ref for ref in refs if ref.get("controller")), None)
    if controller is None:
        return FOREIGN
    if controller.get("uid") == job_uid:
        return OURS
    same_job = controller.get("kind") == KIND and controller.get("name") == job_name
    return PREVIOUS if same_job else FOREIGN


def conflict_message(kind: str, meta: Mapping[str, Any]) -> str:
    """What the user reads about a child object's name being taken."""
    refs = meta.get("ownerReferences") or []
    owner = next((f"{ref.get('kind')}/{ref.get('name')}" for ref in refs if ref.get("controller")), "nobody")
    return (f"{kind} {meta.get('namespace')}/{meta.get('name')} exists but is not controlled by this job "
            f"(controller: {owner}); delete it or rename the job: the operator never adopts or changes it")


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
    was = ctx.status.condition(r.CREATED)
    if not p.deleting and (not was or was.reason != r.POD_NAME_CONFLICT):
        ctx.events.append(Event("Warning", r.POD_NAME_CONFLICT, message))
    ctx.cond(r.CREATED, False, r.POD_NAME_CONFLICT, message)
    ctx.say(message)
