"""Ranks stuck Terminating: say which, on which node, and free their names when the node is down.

A rank pod is deleted gracefully: the kubelet stops its containers and then the pod object goes.
A node that is down (partitioned, powered off, its kubelet dead) never confirms, so the pod keeps
its deletionTimestamp for ever, and since every gang generation reuses the rank's name, the next
gang cannot be created: the job hangs with nothing in its status. Kubernetes' pod GC controller
force-deletes such pods only once an admin taints the node out-of-service; a training job should
not wait for that. So:

* a pod ``stuck_after`` seconds past its deletion deadline (deletionTimestamp, which already
  includes the grace period) is stuck: condition ``StuckTerminating=True`` names each pod, its node
  and the node's state, with a Warning event once per change;
* on a node that is NotReady or gone, the pod is force-deleted (grace period 0), as the pod GC
  controller does for an out-of-service node: its containers cannot be running anywhere the new
  gang could meet them (the new gang has new IPs and a new generation);
* on a Ready node (a slow kubelet, a finalizer) or one we may not read, only the condition: the
  operator never forces what the kubelet may still be cleaning up;
* ``StuckTerminating=False/Cleared`` once none is stuck.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpjob_operator.api.observed import NODE_GONE, NODE_NOT_READY, NODE_UNKNOWN, NodeView, PodObservation
from dpjob_operator.api.timestamps import parse_iso
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import DeletePods, Event
from dpjob_operator.reconcile.context import PassContext

DOWN = (NODE_NOT_READY, NODE_GONE)


def stuck_pods(pods: Sequence[PodObservation], ctx: PassContext, stuck_after: float) -> list[PodObservation]:
    """Pods past their deletion deadline by ``stuck_after`` seconds; asks to be woken for the next one."""
    stuck = []
    for p in pods:
        deadline = parse_iso(p.deletion_timestamp) if p.deleting else None
        if deadline is None:
            continue
        late = (ctx.now - deadline).total_seconds() - stuck_after
        if late >= 0:
            stuck.append(p)
        else:
            ctx.wake_within(-late)
    return stuck


def report_stuck(ctx: PassContext, ours: Sequence[PodObservation], nodes: NodeView | None) -> None:
    if nodes is None:
        return
    stuck = stuck_pods(ours, ctx, nodes.stuck_after)
    if not stuck:
        if ctx.status.is_true(r.STUCK_TERMINATING):
            ctx.cond(r.STUCK_TERMINATING, False, r.CLEARED, "no rank pod is stuck Terminating")
        return
    health = {p.name: nodes.health.get(p.node or "", NODE_UNKNOWN) for p in stuck}
    forced = tuple(sorted(p.name for p in stuck if health[p.name] in DOWN))
    reason = r.NODE_NOT_READY if forced else r.POD_STUCK_TERMINATING
    parts = [f"pod {p.name} on node {p.node or '(none)'} ({health[p.name]}) has been Terminating since "
             f"{p.deletion_timestamp}" for p in sorted(stuck, key=lambda p: p.name)]
    message = "; ".join(parts) + (
        ": force-deleting it, as the pod GC controller does for a node that is down" if forced else
        ": its node has not confirmed the deletion; the next gang waits for the name (check the node and "
        "finalizers; the operator forces deletion only on a NotReady node)")
    was = ctx.status.condition(r.STUCK_TERMINATING)
    if not was or was.status != "True" or was.message != message:
        ctx.events.append(Event("Warning", r.STUCK_TERMINATING, message))
    ctx.cond(r.STUCK_TERMINATING, True, reason, message)
    if forced:
        ctx.actions.append(DeletePods(forced, r.STUCK_TERMINATING, force=True))
