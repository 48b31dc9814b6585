"""Converge policy: create the missing ranks, remove extra ones, and say where the gang stands."""

from __future__ import annotations

from collections.abc import Sequence

from dpjob_operator.api.names import rank_pod_name
from dpjob_operator.api.observed import PodObservation, RankTableOutcome
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import (
    CreatePods,
    DeletePods,
    EnsureEnvironment,
    EnsureNetworkPolicy,
    EnsureService,
)
from dpjob_operator.reconcile.claims import report_blocked
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.inplace import runs_in_place
from dpjob_operator.reconcile.placement import avoided_nodes
from dpjob_operator.reconcile.ranktable_status import report_rank_table
from dpjob_operator.reconcile.scheduling import ensure_gang, gang_of_generation, report_scheduling


def converge(ctx: PassContext, current: Sequence[PodObservation], all_pods: Sequence[PodObservation],
             rank_table: RankTableOutcome | None, foreign: Sequence[PodObservation] = ()) -> None:
    """Make the current generation whole, then report scheduling, rank table and phase.

    ``all_pods`` includes pods we do not control: their names are taken, so those ranks wait.
    """
    spec = ctx.job.spec
    ctx.actions.append(EnsureService())  # the executor remembers it per job uid: no API call after the first
    ctx.actions.append(EnsureNetworkPolicy())  # likewise; before the pods, so no rank is ever open to all
    ctx.actions.append(EnsureEnvironment())  # likewise, until the spec changes what the ranks share
    names_in_use = {p.name for p in all_pods}
    present = {p.index for p in current}
    absent = [i for i in range(spec.replicas) if i not in present]
    missing = tuple(i for i in absent if rank_pod_name(ctx.job.name, i) not in names_in_use)
    group = gang_of_generation(ctx, current)
    ensure_gang(ctx, group)
    if missing:
        ctx.actions.append(CreatePods(missing, ctx.pod_generation, group, avoided_nodes(ctx.status, ctx.pod_generation),
                                      in_place=runs_in_place(ctx), admission=ctx.admission))
    extra = [p.name for p in current if p.index >= spec.replicas and not p.deleting]
    if extra:  # elastic scale-down: the highest ranks leave, torchrun re-forms the group
        ctx.actions.append(DeletePods(tuple(extra), r.SCALED_DOWN))

    live = [p for p in current if not p.deleting and p.index < spec.replicas]
    if len(live) == spec.replicas:
        ctx.cond(r.CREATED, True, r.PODS_CREATED, f"all {spec.replicas} rank pod(s) exist")
    report_scheduling(ctx, live)
    if rank_table is not None:
        report_rank_table(ctx, rank_table)
    report_phase(ctx, live)
    report_blocked(ctx, foreign, absent)


def report_phase(ctx: PassContext, live: Sequence[PodObservation]) -> None:
    """Pending -> Created -> Running, with the messages ``kubectl get`` shows meanwhile."""
    spec = ctx.job.spec
    # A rank restarting in place is not yet in this gang (reconcile/inplace.py).
    running = [p for p in live if p.phase == "Running" and p.gang_generation == ctx.generation]
    finished = [p for p in live if p.phase == "Succeeded"]
    if running and len(running) + len(finished) == spec.replicas and ctx.old.phase == r.RUNNING:
        # Some ranks finished first (AllRanks waits for the rest): still Running, not a regression.
        ctx.say(f"{len(finished)}/{spec.replicas} rank(s) finished, {len(running)} still running")
    elif len(running) == spec.replicas:
        ctx.cond(r.RUNNING, True, r.ALL_RANKS_RUNNING, f"all {spec.replicas} rank(s) are running")
        if ctx.old.phase == r.RESTARTING:
            ctx.cond(r.RESTARTING, False, r.RECOVERED, f"the gang of restart {ctx.generation} is running")
        ctx.phase(r.RUNNING, r.ALL_RANKS_RUNNING, f"all {spec.replicas} rank(s) running, world size {spec.world_size}")
    elif ctx.status.phase == r.RESTARTING:
        ctx.say(f"restart {ctx.generation}: {len(running)}/{spec.replicas} rank(s) running")
    elif ctx.old.phase == r.RUNNING and spec.rendezvous.mode == "elastic":
        # torchrun keeps training with the ranks it has while a rank is replaced or added: the
        # job is still Running, not back to Pending.
        ctx.say(f"elastic: {len(running)}/{spec.replicas} rank(s) running, "
                f"{spec.replicas - len(running)} joining")
    elif len(live) == spec.replicas:
        ctx.phase(r.CREATED, r.PODS_CREATED,
                  f"all {spec.replicas} rank pod(s) created, {len(running)}/{spec.replicas} running")
    else:
        ctx.phase(r.PENDING, r.ACCEPTED, f"creating {spec.replicas} rank pod(s), world size {spec.world_size}")
