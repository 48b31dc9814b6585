"""Reading a node's health, for ranks stuck Terminating (reconcile/stuck.py). Never written."""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from dpjob_operator.api.observed import NODE_GONE, NODE_NOT_READY, NODE_READY, NODE_UNKNOWN
from dpjob_operator.k8s.client import KubeClient

log = logging.getLogger("dpjob.k8s")
_warned_forbidden = False


def node_health(kube: KubeClient, name: str) -> str:
    """Ready, NotReady (Ready condition False or Unknown, or none at all), Gone (404), or Unknown
    (403: a namespaced install may not read nodes; such pods are reported, never forced)."""
    return node_state(kube, name)[0]


def node_state(kube: KubeClient, name: str) -> tuple[str, list[dict[str, Any]]]:
    """(health as in ``node_health``, the node's taints)."""
    global _warned_forbidden
    try:
        resp = kube.call("GET", kube.core.read_node, name, _preload_content=False)
    except ApiException as e:
        if e.status == 404:
            return NODE_GONE, []
        if e.status == 403:
            if not _warned_forbidden:
                log.warning("may not get nodes (RBAC): ranks stuck Terminating are reported, never force-deleted")
                _warned_forbidden = True
            return NODE_UNKNOWN, []
        raise
    body = json.loads(resp.data)
    conditions = (body.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    taints: list[dict[str, Any]] = (body.get("spec") or {}).get("taints") or []
    return NODE_READY if ready == "True" else NODE_NOT_READY, taints
