"""A node's health and taints: read once (``node_state``) or from a served Node (``state_of``). Never written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpjob_operator.api.observed import NODE_GONE, NODE_NOT_READY, NODE_READY, NODE_UNKNOWN
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.optional_read import FORBIDDEN, GONE, read_optional

_FORBIDDEN = "may not get nodes (RBAC): ranks stuck Terminating are reported, never force-deleted"
NodeState = tuple[str, list[dict[str, Any]]]  # (health, taints)


def node_health(kube: KubeClient, name: str) -> str:
    """Ready, NotReady (Ready condition False or Unknown, or none at all), Gone (404), or Unknown
    (403: a namespaced install may not read nodes; such pods are reported, never forced)."""
    return node_state(kube, name)[0]


def state_of(node: Mapping[str, Any]) -> NodeState:
    """(Ready or NotReady, the taints) of a Node as served."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    taints: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
    return NODE_READY if ready == "True" else NODE_NOT_READY, taints


def node_state(kube: KubeClient, name: str) -> NodeState:
    """(health as in ``node_health``, the node's taints): one GET."""
    code, body = read_optional(kube, kube.core.read_node, name, _FORBIDDEN)
    if code == GONE:
        return NODE_GONE, []
    if code == FORBIDDEN:
        return NODE_UNKNOWN, []
    return state_of(body)
