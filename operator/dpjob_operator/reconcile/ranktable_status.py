"""Rank-table policy: status.rankTable, the RankTableReady condition, and applying the table."""

from __future__ import annotations

from dpjob_operator.api.names import ranktable_configmap_name
from dpjob_operator.api.observed import RankTableOutcome
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import ApplyRankTable, Event
from dpjob_operator.reconcile.conditions import get_condition
from dpjob_operator.reconcile.context import PassContext


def report_rank_table(ctx: PassContext, outcome: RankTableOutcome) -> None:
    """Record the builder's outcome; announce completion once per generation, problems once."""
    gen = ctx.generation
    ctx.status["rankTable"] = {"format": outcome.format, "configMap": ranktable_configmap_name(ctx.job.name),
                               "restart": gen, "ready": outcome.ready, "reason": outcome.reason}
    was = get_condition(ctx.conditions, r.RANK_TABLE_READY)
    already = was and was.get("status") == "True" and ctx.old.get("rankTable", {}).get("restart") == gen
    if outcome.ready and not already:
        ctx.events.append(Event("Normal", r.RANK_TABLE_READY,
                                f"rank table ({outcome.format}) completed for restart {gen}"))
    if not outcome.ready and outcome.reason.startswith("Invalid") and (not was or was.get("reason") != outcome.reason):
        ctx.events.append(Event("Warning", outcome.reason, outcome.message))
    ctx.cond(r.RANK_TABLE_READY, outcome.ready, outcome.reason, outcome.message)
    # Before any pod creation: a kubelet holds a pod in ContainerCreating until its ConfigMap exists.
    ctx.actions.insert(0, ApplyRankTable(dict(outcome.files)))
