"""Restart in place: the strategy a job runs with, and the books of the restarts the kubelet makes.

With ``InPlace`` (builders/restart_rules.py) the kubelet, not the operator, restarts a rank pod
whose trainer exits with a retriable code, and the ranks that lost it as a peer exit 75 and
restart the same way. The operator sees it afterwards: a pod's gang generation is its
``dpjob.io/restart`` label (``status.recreatedAt``, the generation its gang was created in) plus
its trainer's ``restartCount``. A pod ahead of ``status.restarts`` has restarted in place: the
restart is counted against ``backoffLimit`` like any other, ``lastFailure`` names the rank to
blame, and the job goes ``Restarting`` until every rank runs the new generation. When the budget
is spent, the job fails and its pods are stopped.

A rank that does not follow within ``FOLLOW_SECONDS`` (a user's script that hangs in a collective
instead of exiting) would hold the others in their rendezvous for ever: the gang is recreated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

from dpjob_operator.api.inplace_cause import RESTARTING_ALL
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.api.status import LastFailure, LastRestart
from dpjob_operator.api.termination import cause_excerpt
from dpjob_operator.api.timestamps import parse_iso
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.failure import fail_job, restart_gang
from dpjob_operator.reconcile.restart import describe_failure

IN_PLACE, RECREATE = "InPlace", "Recreate"
FOLLOW_SECONDS = 30.0
EXIT_PEER_LOST = 75
# kube-scheduler's NodeDeclaredFeatures filter, for a node whose kubelet does not declare what the pod needs
FEATURES_UNMATCHED = "didn't match Pod's required features"


def resolve_strategy(job: Job, in_place_served: bool) -> tuple[str, str | None]:
    """(the strategy ``job`` runs with, why not InPlace when that is not what it gets)."""
    policy = job.spec.run_policy
    if policy.restart_strategy == RECREATE:
        return RECREATE, None
    if policy.restart_policy == "Never":
        return RECREATE, "restartPolicy is Never: a failure fails the job"
    if policy.backoff_limit == 0:
        # Restart rules would make the kubelet run a failed rank again before the operator could stop
        # it, and the restart would replace the failed container's exit code and termination message.
        return RECREATE, "backoffLimit is 0: a failure fails the job"
    if job.spec.rendezvous.mode != "static":
        return RECREATE, "elastic rendezvous: torchrun's agents restart their own workers"
    if not in_place_served:
        return RECREATE, ("the cluster does not serve RestartAllContainers, or the operator has restart in "
                          "place disabled")
    return IN_PLACE, None


def decide_strategy(ctx: PassContext, in_place_served: bool) -> None:
    """``status.restartStrategy``, once per job; asking for InPlace and not getting it is announced."""
    if ctx.status.restart_strategy in (IN_PLACE, RECREATE):
        return
    strategy, why = resolve_strategy(ctx.job, in_place_served)
    ctx.status = replace(ctx.status, restart_strategy=strategy)
    if why is not None and ctx.job.spec.run_policy.restart_strategy == IN_PLACE:
        ctx.events.append(Event("Warning", r.IN_PLACE_UNAVAILABLE,
                                f"restartStrategy InPlace: {why}; a failure recreates the gang"))


def runs_in_place(ctx: PassContext) -> bool:
    return ctx.status.restart_strategy == IN_PLACE


def fall_back_to_recreate(ctx: PassContext, current: Sequence[PodObservation]) -> bool:
    """An InPlace rank pod that the scheduler cannot place because kubelets do not declare
    ``RestartAllContainersOnContainerExits`` (older kubelets, the gate off): the job runs Recreate
    from now on, and its gang is recreated without restart rules (not charged to ``backoffLimit``)."""
    if not runs_in_place(ctx):
        return False
    stuck = next((p for p in current if not p.deleting and FEATURES_UNMATCHED in (p.unschedulable or "")), None)
    if stuck is None:
        return False
    ctx.status = replace(ctx.status, restart_strategy=RECREATE)
    message = (f"rank {stuck.index} cannot be scheduled with restart rules ({stuck.unschedulable}): the kubelets "
               f"do not declare RestartAllContainersOnContainerExits; the job runs restartStrategy Recreate")
    ctx.events.append(Event("Warning", r.IN_PLACE_UNAVAILABLE, message))
    restart_gang(ctx, current, r.IN_PLACE_UNAVAILABLE, False, message)
    return True


def _cause_class(exit_code: int | None) -> int:
    """Blame order: a known exit first, then an unknown one, then a lost peer (a bystander)."""
    if exit_code is None or exit_code < 0:
        return 1
    return 2 if exit_code == EXIT_PEER_LOST else 0


def _cause(members: Sequence[PodObservation], gen: int) -> PodObservation | None:
    restarted = [p for p in members if p.in_place > 0 and p.gang_generation >= gen]
    # A known exit before an unknown one before a lost peer; then the earliest termination seen.
    return min(restarted, key=lambda p: (_cause_class(_seen_exit(p)[0]), p.finished_at or "~", p.index),
               default=None)


def _seen_exit(pod: PodObservation) -> tuple[int | None, str | None, str]:
    """(exit code, reason, message) of the run that ended: the trainer's own record first, then the
    kubelet's termination when the pod cache saw it before the restart replaced it (api/inplace_cause.py)."""
    seen = pod.reason not in (None, RESTARTING_ALL) and pod.exit_code is not None
    code = pod.in_place_exit if pod.in_place_exit is not None else (pod.exit_code if seen else None)
    reason = pod.reason if seen else (r.RANK_FAILED if code is not None else "Unknown")
    message = cause_excerpt(pod.message) if seen and pod.message else (
        "restarted in place" + ("" if code is not None else ": the exit code was not recorded"))
    return code, reason, message


def _record_cause(ctx: PassContext, pod: PodObservation, failed_gen: int) -> None:
    code, reason, message = _seen_exit(pod)
    failure = LastFailure(
        rank=pod.index, pod=pod.name, node=pod.node or "", container="trainer",
        exit_code=-1 if code is None else code, reason=reason, message=message,
        restart=failed_gen, time=ctx.now_s, finished_time=pod.finished_at)
    ctx.status = replace(ctx.status, last_failure=failure)


def account_in_place(ctx: PassContext, current: Sequence[PodObservation]) -> bool:
    """True when this pass counted an in-place restart, failed the job on it, or recreated laggards."""
    if not runs_in_place(ctx):
        return False
    members = [p for p in current if p.index < ctx.job.spec.replicas and not p.deleting]
    newest = max((p.gang_generation for p in members), default=ctx.generation)
    if newest > ctx.generation:
        _count(ctx, current, members, newest)
        return True
    _refine_cause(ctx, members)
    return _recreate_laggards(ctx, current, members)


def _count(ctx: PassContext, current: Sequence[PodObservation], members: Sequence[PodObservation],
           newest: int) -> None:
    failed_gen, restarts = ctx.generation, newest - ctx.generation
    cause = _cause(members, newest)
    if cause is not None:
        _record_cause(ctx, cause, failed_gen)
        ctx.events.append(Event("Warning", r.RANK_FAILED, describe_failure(cause_as_failure(cause))))
    policy = ctx.job.spec.run_policy
    spent = ctx.status.failure_restarts or 0
    if spent + restarts > policy.backoff_limit:
        fail_job(ctx, current, r.BACKOFF_LIMIT_EXCEEDED,
                 f"a rank restarted in place; backoffLimit {policy.backoff_limit} reached after {spent} "
                 f"gang restart(s)")
        return
    ctx.status = replace(
        ctx.status, recreated_at=ctx.status.pod_generation, restarts=newest, failure_restarts=spent + restarts,
        restarts_by_reason=added(ctx.status.restarts_by_reason, r.RANK_FAILED, restarts),
        restarts_by_strategy=added(ctx.status.restarts_by_strategy, IN_PLACE, restarts),
        last_restart=LastRestart(restart=newest, strategy=IN_PLACE, reason=r.RANK_FAILED, time=ctx.now_s))
    who = f"rank {cause.index}" if cause is not None else "a rank"
    message = (f"{who} restarted in place; every rank restarts in place (failure restart {spent + restarts} of "
               f"backoffLimit {policy.backoff_limit})")
    ctx.cond(r.RUNNING, False, r.RESTARTING, message)
    ctx.cond(r.RESTARTING, True, r.RANK_FAILED, message)
    ctx.events.append(Event("Warning", r.GANG_RESTART, f"restart {newest} in place: {message}"))
    ctx.status = replace(ctx.status, phase=r.RESTARTING, reason=r.RANK_FAILED, message=message)
    ctx.wake_within(FOLLOW_SECONDS)


def cause_as_failure(pod: PodObservation) -> PodObservation:
    """The pod as the failure it stands for: its previous run's exit, not its running container's."""
    code, reason, message = _seen_exit(pod)
    return replace(pod, exit_code=code, reason=reason, message=message)


def added(counts: Mapping[str, int] | None, key: str, count: int) -> dict[str, int]:
    """``counts`` with ``count`` more under ``key`` (restartsByReason, restartsByStrategy)."""
    out = dict(counts or {})
    out[key] = out.get(key, 0) + count
    return out


def _refine_cause(ctx: PassContext, members: Sequence[PodObservation]) -> None:
    """A better culprit than the one recorded, seen once the other ranks' records arrived."""
    last, failure = ctx.status.last_restart, ctx.status.last_failure
    if last is None or failure is None or last.strategy != IN_PLACE or last.restart != ctx.generation \
            or failure.restart != ctx.generation - 1:
        return
    cause = _cause(members, ctx.generation)
    if cause is not None and _cause_class(_seen_exit(cause)[0]) < _cause_class(failure.exit_code):
        _record_cause(ctx, cause, ctx.generation - 1)


def _recreate_laggards(ctx: PassContext, current: Sequence[PodObservation],
                       members: Sequence[PodObservation]) -> bool:
    last = ctx.status.last_restart
    behind = [p for p in members if p.gang_generation < ctx.generation]
    since = parse_iso(last.time) if last is not None else None
    if not behind or last is None or last.strategy != IN_PLACE or since is None:
        return False
    left = FOLLOW_SECONDS - (ctx.now - since) / timedelta(seconds=1)
    if left > 0:
        ctx.wake_within(left)
        return False
    ranks = ", ".join(str(p.index) for p in behind)
    message = (f"rank(s) {ranks} did not restart in place within {FOLLOW_SECONDS:.0f}s of the gang's restart "
               f"{ctx.generation}: recreating the gang")
    ctx.events.append(Event("Warning", r.NOT_RESTARTED_IN_PLACE, message))
    restart_gang(ctx, current, r.NOT_RESTARTED_IN_PLACE, False, message)
    return True
