"""Cleanup policy of a finished job: ``cleanPodPolicy`` on every terminal path, then the TTL."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.api.status import JobStatus
from dpjob_operator.api.timestamps import parse_iso
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import DeleteJob, DeletePods
from dpjob_operator.reconcile.context import PassContext


def pods_to_clean(policy: str, phase: str, current: Sequence[PodObservation]) -> list[str]:
    """The pods ``cleanPodPolicy`` removes once the job is ``phase``.

    Running ranks are always stopped on success (a Succeeded job never holds accelerators);
    on failure ``None`` keeps even running pods for debugging a hang.
    """
    if policy == "All":
        return [p.name for p in current if not p.deleting]
    if policy == "None" and phase == r.FAILED:
        return []
    return [p.name for p in current if p.active]


def ttl_due(job: Job, status: JobStatus) -> datetime | None:
    """When ``ttlSecondsAfterFinished`` deletes the finished job (None: no TTL or not finished)."""
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    done = parse_iso(status.completion_time)
    if ttl is None or done is None or status.phase not in r.TERMINAL:
        return None
    return done + timedelta(seconds=ttl)


def finish(ctx: PassContext, current: Sequence[PodObservation], phase: str) -> None:
    """Terminal: clean the pods, release the gang, and delete the job once its TTL elapsed."""
    policy = ctx.job.spec.run_policy.clean_pod_policy
    doomed = pods_to_clean(policy, phase, current)
    if doomed:
        ctx.actions.append(DeletePods(tuple(doomed), f"CleanPodPolicy{policy}"))
    ctx.release_gang()
    ctx.count([p for p in current if p.name not in doomed])
    due = ttl_due(ctx.job, ctx.status)
    if due is not None and ctx.now >= due:
        ttl = ctx.job.spec.run_policy.ttl_seconds_after_finished
        ctx.actions.append(DeleteJob(f"ttlSecondsAfterFinished={ttl} elapsed"))
