"""Failure policy: a failed, disrupted or vanished rank decides for the whole gang.

The decision itself (restart or fail, charged or not) is ``restart.decide_failure``; which rank
is to blame is ``rootcause.root_cause``. This module finds the failure, records
``status.lastFailure`` and carries the decision out: a gang restart bumps the generation
(written to status before any pod is deleted, so a decided restart is never forgotten).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from dpjob_operator.api.names import rank_pod_name
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.status import LastFailure, LastRestart
from dpjob_operator.api.termination import cause_excerpt
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import DeletePods, Event
from dpjob_operator.reconcile.cleanup import finish
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.placement import plan_avoidance
from dpjob_operator.reconcile.restart import decide_failure, describe_failure
from dpjob_operator.reconcile.rootcause import root_cause


def handle_failures(ctx: PassContext, current: Sequence[PodObservation]) -> bool:
    """True when a failure (or a wait for its root cause) decided this pass."""
    # A rank above spec.replicas was scaled away by us (elastic scale-down): the kubelet reports it
    # Failed with exit 143 once deleted, which is no failure of the job.
    replicas = ctx.job.spec.replicas
    failed = [p for p in current
              if p.index < replicas and (p.phase == "Failed" or (p.disrupted and not p.deleting))]
    if failed:
        blame = root_cause(failed, current, ctx.now)
        if blame.pod is None:
            names = ", ".join(str(p.index) for p in failed)
            ctx.say(f"rank(s) {names} lost a peer; waiting up to {blame.wait_seconds:.0f}s "
                    f"for the rank that failed first")
            ctx.wake_within(blame.wait_seconds)
            return True
        on_failure(ctx, current, blame.pod)
        return True
    spec = ctx.job.spec
    if spec.rendezvous.mode != "static":
        return False
    # A static gang was created for another size (kubectl scale): restart it at the new size.
    resized = [p for p in current if p.replicas_annotation not in (None, spec.replicas) and not p.deleting]
    if resized:
        restart_gang(ctx, current, r.RESIZED, counted=False,
                     message=f"spec.replicas changed to {spec.replicas}: restarting the gang at the new size")
        return True
    gone = _vanished_rank(ctx, current) if ctx.status.phase == r.RUNNING else None
    if gone is not None:
        on_failure(ctx, current, gone)
        return True
    return False


def _vanished_rank(ctx: PassContext, current: Sequence[PodObservation]) -> PodObservation | None:
    """A rank deleted by someone else (kubectl delete, eviction, a drain) while the gang runs.

    The static group lost a member, so the whole gang restarts (not charged). We never delete a
    current rank of a running gang ourselves: a restart first moves to a new generation.
    """
    replicas = ctx.job.spec.replicas
    terminating = [p for p in current if p.deleting and p.index < replicas]
    if terminating:
        return replace(terminating[0], reason=terminating[0].reason or r.POD_DELETED, disrupted=True)
    present = {p.index for p in current}
    vanished = [i for i in range(replicas) if i not in present]
    if vanished:
        return PodObservation(name=rank_pod_name(ctx.job.name, vanished[0]), uid="", index=vanished[0],
                              restart=ctx.pod_generation, phase="Unknown", reason=r.POD_DELETED, disrupted=True)
    return None


def on_failure(ctx: PassContext, current: Sequence[PodObservation], pod: PodObservation) -> None:
    """Record ``status.lastFailure`` for ``pod`` and restart the gang or fail the job."""
    decision = decide_failure(ctx.job.spec.run_policy, pod, ctx.status.failure_restarts or 0)
    cause = cause_excerpt(pod.message)
    failure = LastFailure(rank=pod.index, pod=pod.name, node=pod.node or "", container=pod.container or "",
                          exit_code=pod.exit_code if pod.exit_code is not None else -1,
                          reason=pod.reason or decision.reason, message=cause, restart=ctx.generation,
                          time=ctx.now_s, finished_time=pod.finished_at)
    ctx.status = replace(ctx.status, last_failure=failure)
    # The same text as status, where `kubectl describe` and event exporters look.
    ctx.events.append(Event("Warning", r.RANK_FAILED, describe_failure(pod) + (f": {cause}" if cause else "")))
    if decision.restart:
        avoid = plan_avoidance(ctx, pod, ctx.generation + 1)
        message = decision.message + (f"; the next gang avoids it ({avoid})" if avoid else "")
        restart_gang(ctx, current, decision.reason, decision.counted, message)
    else:
        fail_job(ctx, current, decision.reason, decision.message)


def restart_gang(ctx: PassContext, current: Sequence[PodObservation], reason: str, counted: bool,
                 message: str, force: Collection[str] = ()) -> None:
    """Gang restart: bump the generation (in status, written first), delete every current pod; those
    named in ``force`` with grace period 0 (their node is lost and will never confirm)."""
    gen = ctx.generation + 1
    failures = (ctx.status.failure_restarts or 0) + (1 if counted else 0)
    by_reason = dict(ctx.status.restarts_by_reason or {})
    by_reason[reason] = by_reason.get(reason, 0) + 1
    by_strategy = dict(ctx.status.restarts_by_strategy or {})
    by_strategy["Recreate"] = by_strategy.get("Recreate", 0) + 1
    ctx.status = replace(ctx.status, restarts=gen, failure_restarts=failures, restarts_by_reason=by_reason,
                         restarts_by_strategy=by_strategy, recreated_at=None,  # the new pods carry gen itself
                         last_restart=LastRestart(restart=gen, strategy="Recreate", reason=reason, time=ctx.now_s))
    doomed = [p.name for p in current if not p.deleting and p.name not in force]
    if doomed:
        ctx.actions.append(DeletePods(tuple(doomed), f"GangRestart{reason}"))
    if force:
        ctx.actions.append(DeletePods(tuple(force), f"GangRestart{reason}", force=True))
    ctx.cond(r.RUNNING, False, r.RESTARTING, message)
    ctx.cond(r.RESTARTING, True, reason, message)
    ctx.events.append(Event("Warning", r.GANG_RESTART, f"restart {gen}: {message}"))
    ctx.status = replace(ctx.status, phase=r.RESTARTING, reason=reason, message=message)
    ctx.count([])


def fail_job(ctx: PassContext, current: Sequence[PodObservation], reason: str, message: str) -> None:
    """The job has failed for good: record it and clean up per cleanPodPolicy."""
    ctx.status = replace(ctx.status, completion_time=ctx.now_s)
    ctx.cond(r.RUNNING, False, reason, message)
    ctx.cond(r.FAILED, True, reason, message)
    ctx.phase(r.FAILED, reason, message, "Warning")
    finish(ctx, current, r.FAILED)
