"""Why the job is not running: one condition that aggregates every reason ranks are waiting.

``kubectl get dpj`` shows a phase; when it is not Running the user's next question is "why?",
and the answer is spread over pods (the kubelet's waiting reasons: an image that cannot be
pulled, a missing ConfigMap or Secret), the scheduler (PodsScheduled), the gang, a suspension
(by the user), Kueue's queue and the stall watchdog. ``Waiting`` gathers them, most actionable first:

======================  =============================================================
reason                  when
======================  =============================================================
Suspended               ``runPolicy.suspend``
Queued                  Kueue has not admitted the job (yet, or again: reconcile/kueue_gate.py)
Stalled                 the stall watchdog fired (Stalled=True)
ImagePullError          a rank's image cannot be pulled (ErrImagePull, ImagePullBackOff, ...)
ContainerConfigError    a rank's container cannot be created (missing ConfigMap/Secret key, ...)
Unschedulable,          the scheduler's (or the gang's) verdict, from PodsScheduled
GangUnschedulable
Starting                none of the above yet: ranks are being created, pulled or started
Running                 (False) every rank runs
======================  =============================================================

The Warning events for the user-fixable reasons come once per change of reason; the condition's
message names the first rank and the kubelet's own words.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext

IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                           "RegistryUnavailable", "SignatureValidationFailed"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                            "PreCreateHookError", "PreStartHookError"})
_ACTIONABLE = (r.IMAGE_PULL_ERROR, r.CONTAINER_CONFIG_ERROR)


def _first(live: Sequence[PodObservation], reasons: frozenset[str]) -> PodObservation | None:
    return next((p for p in live if p.waiting and p.waiting.split(":", 1)[0] in reasons), None)


def _why(ctx: PassContext, live: Sequence[PodObservation]) -> tuple[str, str]:
    spec = ctx.job.spec
    running = sum(1 for p in live if p.phase == "Running")
    if ctx.status.phase == r.SUSPENDED:
        return r.SUSPENDED, "the job is suspended (runPolicy.suspend): no rank runs until it is resumed"
    if ctx.status.phase == r.QUEUED:
        return r.QUEUED, f"queued in Kueue: {ctx.status.message}"
    stalled = ctx.status.condition(r.STALLED)
    if stalled is not None and stalled.status == "True":
        return r.STALLED, stalled.message or "no step reported within stallTimeoutSeconds"
    for reason, kinds in ((r.IMAGE_PULL_ERROR, IMAGE_REASONS), (r.CONTAINER_CONFIG_ERROR, CONFIG_REASONS)):
        p = _first(live, kinds)
        if p is not None:
            return reason, f"rank {p.index} (pod {p.name}) cannot start: {p.waiting}"
    scheduled = ctx.status.condition(r.PODS_SCHEDULED)
    if scheduled and scheduled.status == "False":
        return str(scheduled.reason), str(scheduled.message)
    return r.STARTING, (f"{running}/{spec.replicas} rank(s) running; {len(live)}/{spec.replicas} created"
                        + (f"; rank {p.index} waits: {p.waiting}" if (p := _first_waiting(live)) else ""))


def _first_waiting(live: Sequence[PodObservation]) -> PodObservation | None:
    return next((p for p in live if p.waiting), None)


def report_waiting(ctx: PassContext, current: Sequence[PodObservation]) -> None:
    """Set ``Waiting``: True with the most actionable reason while not every rank runs."""
    if ctx.status.phase in r.TERMINAL:  # decided this pass: nothing waits any more
        if ctx.status.is_true(r.WAITING):
            ctx.cond(r.WAITING, False, str(ctx.status.phase), "the job has finished")
        return
    live = [p for p in current if not p.deleting and p.index < ctx.job.spec.replicas]
    spec = ctx.job.spec
    all_running = len(live) == spec.replicas and all(p.phase == "Running" for p in live)
    if all_running and not ctx.status.is_true(r.STALLED):
        if ctx.status.condition(r.WAITING) is not None:
            ctx.cond(r.WAITING, False, r.RUNNING, f"all {spec.replicas} rank(s) are running")
        return
    reason, message = _why(ctx, live)
    was = ctx.status.condition(r.WAITING)
    if reason in _ACTIONABLE and (not was or was.reason != reason or was.status != "True"):
        ctx.events.append(Event("Warning", reason, message))
    ctx.cond(r.WAITING, True, reason, message)
