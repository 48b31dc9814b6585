"""Success policy: when the job is done, and which ranks must then be stopped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import DeletePods
from dpjob_operator.reconcile.context import PassContext


def succeeded(policy: str, replicas: int, pods: Iterable[PodObservation]) -> bool:
    """AllRanks: every rank index has a Succeeded pod. RankZero: rank 0 Succeeded."""
    done = {p.index for p in pods if p.phase == "Succeeded"}
    if policy == "RankZero":
        return 0 in done
    return all(i in done for i in range(replicas))


def success_message(policy: str, replicas: int) -> str:
    if policy == "RankZero":
        return "rank 0 succeeded (successPolicy RankZero); remaining ranks are stopped"
    return f"all {replicas} rank(s) succeeded"


def apply_success(ctx: PassContext, current: Sequence[PodObservation]) -> bool:
    """True (and Succeeded) once the success policy is met; leftover ranks are stopped."""
    spec = ctx.job.spec
    if not succeeded(spec.success_policy, spec.replicas, current):
        return False
    leftovers = [p.name for p in current if p.active]
    if leftovers:
        ctx.actions.append(DeletePods(tuple(leftovers), r.JOB_SUCCEEDED))
    ctx.release_gang()
    message = success_message(spec.success_policy, spec.replicas)
    ctx.status = replace(ctx.status, completion_time=ctx.now_s)
    ctx.cond(r.RUNNING, False, r.JOB_SUCCEEDED, "the job has finished")
    ctx.cond(r.SUCCEEDED, True, r.JOB_SUCCEEDED, message)
    ctx.phase(r.SUCCEEDED, r.JOB_SUCCEEDED, message)
    ctx.count([p for p in current if p.name not in leftovers])
    return True
