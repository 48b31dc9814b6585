"""Rank-table policy: status.rankTable, the RankTableReady condition, and applying the table.

The condition tells the truth about what a trainer can read: a completed table that the API
server refused to store (too large, a quota, an admission webhook) is ``RankTableWriteFailed``,
not Ready, because the pods still see ``initializing``.
"""

from __future__ import annotations

from dataclasses import replace

from dpjob_operator.api.names import ranktable_configmap_name
from dpjob_operator.api.observed import RankTableOutcome
from dpjob_operator.api.status import RankTable
from dpjob_operator.builders.configmaps import ranktable_layout
from dpjob_operator.builders.ranktable import REASON_TOO_LARGE
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import ApplyRankTable, Event
from dpjob_operator.reconcile.context import PassContext

# Reasons worth a Warning event: the user must act (the table will not complete by waiting).
_WARN_PREFIXES = ("Invalid", REASON_TOO_LARGE, r.RANK_TABLE_WRITE_FAILED, r.CONFIGMAP_NAME_CONFLICT)


def report_rank_table(ctx: PassContext, outcome: RankTableOutcome) -> None:
    """Record the builder's outcome; announce completion once per generation, problems once."""
    gen = ctx.pod_generation
    ready, reason, message = outcome.ready, outcome.reason, outcome.message
    if outcome.write_error is not None:  # whatever the table says, the pods cannot read it
        ready, (reason, message) = False, outcome.write_error
    table = RankTable(format=outcome.format, config_map=ranktable_configmap_name(ctx.job.name),
                      config_maps=tuple(sorted(set(ranktable_layout(ctx.job).values()))), restart=gen, ready=ready,
                      reason=reason)
    ctx.status = replace(ctx.status, rank_table=table)
    was = ctx.status.condition(r.RANK_TABLE_READY)
    already = was and was.status == "True" and ctx.old.rank_table is not None and ctx.old.rank_table.restart == gen
    if ready and not already:
        ctx.events.append(Event("Normal", r.RANK_TABLE_READY,
                                f"rank table ({outcome.format}) completed for restart {gen}"))
    if not ready and reason.startswith(_WARN_PREFIXES) and (not was or was.reason != reason):
        ctx.events.append(Event("Warning", reason, message))
    ctx.cond(r.RANK_TABLE_READY, ready, reason, message)
    # Before any pod creation: a kubelet holds a pod in ContainerCreating until its ConfigMap exists.
    ctx.actions.insert(0, ApplyRankTable(dict(outcome.files)))
