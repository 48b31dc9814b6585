"""Restart placement: a gang restarted after a rank failed on a bad node does not go back to it.

When the failed rank's node is NotReady, gone, or carries a NoSchedule/NoExecute taint the job's
pods do not tolerate (a health tool's: the node problem detector, a GPU XID check, a drain), the
next gang generation gets a required node affinity ``kubernetes.io/hostname NotIn [node]``, ANDed
into every node-selector term of the user's own affinity. Recorded in ``status.avoidNodes``
(``{restart, nodes, reason}``), for that generation only: a node that was repaired is used again
by later gangs, and an avoided node never makes a job unschedulable for ever.
"""

from __future__ import annotations

from dataclasses import replace

from dpjob_operator.api.observed import NODE_GONE, NODE_NOT_READY, PodObservation
from dpjob_operator.api.status import AvoidNodes, JobStatus
from dpjob_operator.reconcile.context import PassContext

HOSTNAME_LABEL = "kubernetes.io/hostname"


def why_avoid(ctx: PassContext, pod: PodObservation) -> str | None:
    """Why the node of failed ``pod`` is bad, or None when nothing is known against it."""
    if ctx.nodes is None or not pod.node:
        return None
    health = ctx.nodes.health.get(pod.node)
    if health in (NODE_NOT_READY, NODE_GONE):
        return f"node {pod.node} is {health}"
    taints = ctx.nodes.taints.get(pod.node) or ()
    if taints:
        return f"node {pod.node} is tainted {', '.join(taints)}"
    return None


def plan_avoidance(ctx: PassContext, pod: PodObservation, next_restart: int) -> str | None:
    """Record the node the next generation avoids; returns the reason for the restart message."""
    reason = why_avoid(ctx, pod)
    if reason is None or pod.node is None:
        ctx.status = replace(ctx.status, avoid_nodes=None)
        return None
    ctx.status = replace(ctx.status, avoid_nodes=AvoidNodes(restart=next_restart, nodes=(pod.node,), reason=reason))
    return reason


def avoided_nodes(status: JobStatus, generation: int) -> tuple[str, ...]:
    """The nodes generation ``generation`` must avoid (none unless recorded for it)."""
    avoid = status.avoid_nodes
    return tuple(avoid.nodes or ()) if avoid is not None and avoid.restart == generation else ()
