"""Node loss: a node that dies under the current gang restarts the gang elsewhere, uncharged.

A rank pod on a node whose kubelet stopped stays phase Running (only the kubelet would change
it), and one on a deleted Node stays as it was; Kubernetes evicts such pods only after their
300 s toleration of the node lifecycle controller's taints, and the gang's survivors hang in a
collective meanwhile. A node counts as *lost* when

* it is gone (the Node object was deleted), or
* it is NotReady *and* carries the NoExecute taint ``node.kubernetes.io/unreachable``: its kubelet
  stopped reporting, and the control plane itself has given the node up (after its grace period,
  40 to 50 s on a default cluster). Not ``node.kubernetes.io/not-ready``: that taint follows a
  kubelet that still reports and says NotReady (its container runtime restarting, say), whose
  containers usually run on; Kubernetes' own eviction after the pods' toleration covers it.

A lost node under a rank of the current gang (Running, or Pending and bound) restarts the whole
gang (Recreate), like a disruption: never charged to ``backoffLimit``, as the failure is the
cluster's, not the job's. ``NodeLost=True`` names the nodes and ranks (with a Warning event), the
next gang avoids the nodes (``status.avoidNodes``), and the pods on them are deleted with grace
period 0: no kubelet will ever confirm a graceful deletion. ``NodeLost`` goes False
(``NodesHealthy``) once a gang runs again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from dpjob_operator.api.observed import NODE_GONE, NODE_NOT_READY, NodeView, PodObservation
from dpjob_operator.api.status import AvoidNodes, LastFailure
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.context import PassContext
from dpjob_operator.reconcile.failure import restart_gang

# The node lifecycle controller's taints on a node it has given up (NoExecute: pods are evicted).
LIFECYCLE_TAINTS = ("node.kubernetes.io/unreachable",)


@dataclass(frozen=True)
class NodeLoss:
    """The lost nodes under the current gang, and what was on them."""

    nodes: tuple[str, ...]                 # sorted
    ranks: tuple[int, ...]                 # the ranks on them, sorted
    pods: tuple[str, ...]                  # every current pod on them, deleting or not, sorted
    why: tuple[tuple[str, str], ...]       # (node, why it counts as lost), in the order of ``nodes``

    def describe(self) -> str:
        on = "; ".join(f"node {node} {why}" for node, why in self.why)
        ranks = ", ".join(str(i) for i in self.ranks)
        return f"{on}: rank(s) {ranks} lost with {'it' if len(self.nodes) == 1 else 'them'}"


def why_lost(nodes: NodeView, node: str) -> str | None:
    """Why ``node`` counts as lost, or None while it does not."""
    health = nodes.health.get(node)
    if health == NODE_GONE:
        return "is gone (its Node object was deleted)"
    tainted = [key for key in nodes.no_execute.get(node, ()) if key in LIFECYCLE_TAINTS]
    if health == NODE_NOT_READY and tainted:
        return f"is NotReady and tainted {', '.join(tainted)}:NoExecute"
    return None


def gang_pods(pods: Sequence[PodObservation], generation: int, job_uid: str) -> list[PodObservation]:
    """The pods a lost node is judged for: the job's own, of gang ``generation``, not deleting, and
    Running, or Pending already bound to a node."""
    return [p for p in pods if p.owner_uid == job_uid and p.restart == generation and not p.deleting and p.node
            and p.phase in ("Running", "Pending")]


def find_node_loss(pods: Sequence[PodObservation], generation: int, job_uid: str, replicas: int,
                   nodes: NodeView | None) -> NodeLoss | None:
    """The lost nodes under ranks ``0..replicas-1`` of gang ``generation``; None when none is (or
    nothing is known of the nodes)."""
    if nodes is None:
        return None
    judged = [p for p in gang_pods(pods, generation, job_uid) if p.index < replicas]
    why = {p.node: reason for p in judged if p.node and (reason := why_lost(nodes, p.node)) is not None}
    if not why:
        return None
    on_lost = [p for p in pods if p.owner_uid == job_uid and p.restart == generation and p.node in why]
    return NodeLoss(nodes=tuple(sorted(why)),
                    ranks=tuple(sorted({p.index for p in judged if p.node in why})),
                    pods=tuple(sorted(p.name for p in on_lost)),
                    why=tuple((node, why[node]) for node in sorted(why)))


def apply_node_loss(ctx: PassContext, current: Sequence[PodObservation]) -> bool:
    """Restart the gang away from the nodes lost under it; True when that decided this pass."""
    loss = find_node_loss(current, ctx.pod_generation, ctx.job.uid, ctx.job.spec.replicas, ctx.nodes)
    if loss is None:
        return False
    what = loss.describe()
    first = next(p for p in current if p.node in loss.nodes and p.index == loss.ranks[0] and not p.deleting)
    ctx.status = replace(ctx.status, last_failure=LastFailure(
        rank=first.index, pod=first.name, node=first.node or "", container="", exit_code=-1, reason=r.NODE_LOST,
        message=what, restart=ctx.generation, time=ctx.now_s))
    ctx.events.append(Event("Warning", r.NODE_LOST, what))
    ctx.cond(r.NODE_LOST, True, r.NODE_LOST, what)
    ctx.status = replace(ctx.status, avoid_nodes=AvoidNodes(
        restart=ctx.generation + 1, nodes=loss.nodes, reason="; ".join(f"node {n} {why}" for n, why in loss.why)))
    restart_gang(ctx, current, r.NODE_LOST, counted=False, force=loss.pods,
                 message=f"{what}; restarting the gang on other nodes (not charged to backoffLimit)")
    return True


def settle_node_loss(ctx: PassContext) -> None:
    """``NodeLost`` goes False once a gang runs again (after this pass's other policies)."""
    if ctx.status.is_true(r.NODE_LOST) and ctx.status.phase == r.RUNNING:
        ctx.cond(r.NODE_LOST, False, r.NODES_HEALTHY, f"the gang of restart {ctx.generation} runs on healthy nodes")
