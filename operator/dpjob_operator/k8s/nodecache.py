"""Every Node's health and taints, from a list+watch (``reflector``): what the rank pods run on.

A rank pod whose node stopped (a dead kubelet, a partition, a powered-off machine) stays phase
Running: only the kubelet would change it. The node lifecycle controller marks the node
Ready=Unknown and taints it ``node.kubernetes.io/unreachable:NoExecute``; the pods go only after
their 300 s toleration. A Node that is deleted leaves its pods behind the same way. Neither shows
in the pod cache, so the operator watches Nodes too: when a node's health or its NoExecute taints
change (or the node goes), ``on_change(node_name)`` is called from the watch thread, and the
controller queues a pass for every job with a pod on it (reconcile/node_loss.py decides).

Cluster-scoped and unselected: one list at startup, then one event per real change of a node (the
kubelet's heartbeats go to Leases, not to the Node). Nodes are only read. An install that may not
list nodes (a namespaced one) runs without the watch: ``start`` says so once and returns False.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from dpjob_operator.api.observed import NODE_GONE
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.listing import NODES, may_list
from dpjob_operator.k8s.nodes import NodeState, state_of
from dpjob_operator.k8s.reflector import Reflector

log = logging.getLogger("dpjob.nodes")
Signature = tuple[str, tuple[str, ...]]  # (health, the node's NoExecute taint keys, sorted)


def signature(state: NodeState | None) -> Signature:
    """What of a node is worth a pass when it changes: its health and its NoExecute taints."""
    if state is None:
        return NODE_GONE, ()
    return state[0], tuple(sorted(str(t.get("key")) for t in state[1] if t.get("effect") == "NoExecute"))


class NodeCache:
    def __init__(self, kube: KubeClient, on_change: Callable[[str], None]) -> None:
        self._kube = kube
        self._on_change = on_change
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeState] = {}
        self._reflector = Reflector(kube, NODES, "", (), self._relisted, self._event)
        self._running = False

    def start(self) -> bool:
        """Start the watch when this client may list nodes; False (said once, here) when not."""
        if not may_list(self._kube, NODES, ""):
            log.warning("may not list nodes (RBAC): a node lost under a running gang is noticed only once "
                        "its pods are evicted or deleted; grant get, list and watch on nodes to notice it at once")
            return False
        self._reflector.start()
        self._running = True
        return True

    @property
    def enabled(self) -> bool:
        """The watch runs and has listed every node once: ``get`` answers for the whole cluster."""
        return self._running and self._reflector.synced

    def get(self, name: str) -> NodeState | None:
        """The node's (health, taints); None when the cache does not hold it (off, or no such node as
        far as the watch knows: the caller may read it to tell a deleted node from a new one)."""
        if not self.enabled:
            return None
        with self._lock:
            return self._nodes.get(name)

    def wait_synced(self, timeout: float) -> bool:
        return not self._running or self._reflector.wait_synced(timeout)

    def stuck(self) -> str | None:
        return self._reflector.stuck() if self._running else None

    def stop(self) -> None:
        self._reflector.stop()

    def _relisted(self, _namespace: str | None, items: list[dict[str, Any]]) -> None:
        fresh = {str((node.get("metadata") or {}).get("name", "")): state_of(node) for node in items}
        with self._lock:
            before, self._nodes = self._nodes, fresh
        # What the watch may have missed: a known node that changed or went (a node new to us holds
        # no rank the operator judged by it).
        for name in sorted(before):
            if signature(before[name]) != signature(fresh.get(name)):
                self._on_change(name)

    def _event(self, event_type: str, node: dict[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name", ""))
        after = None if event_type == "DELETED" else state_of(node)
        with self._lock:
            before = self._nodes.pop(name, None)
            if after is not None:
                self._nodes[name] = after
        if signature(before) != signature(after):
            self._on_change(name)
