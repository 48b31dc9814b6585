"""Does the cluster serve restart in place? One server-side dry-run of a pod that asks for it.

An API server without ``ContainerRestartRules`` drops ``restartPolicyRules`` from a pod it
accepts, and one without ``RestartAllContainersOnContainerExits`` refuses the action as an
unknown value; one that serves both returns the rule as sent. A dry run stores nothing, so the
answer costs one request at start and leaves no object behind. The probe pod follows the
``restricted`` Pod Security Standard, so a namespace that enforces it does not refuse it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from dpjob_operator.k8s.client import KubeClient

log = logging.getLogger("dpjob.k8s")

RULE = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [75]}}


def probe_pod(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "dpjob-restart-in-place-probe-", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": "probe.invalid/none", "restartPolicy": "Never", "restartPolicyRules": [RULE],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def keeps_restart_rules(served: dict[str, Any]) -> bool:
    """Whether the pod the API server returned still carries the rule (pure)."""
    containers = (served.get("spec") or {}).get("containers") or [{}]
    return RULE in (containers[0].get("restartPolicyRules") or [])


def serves_restart_in_place(kube: KubeClient, namespace: str) -> tuple[bool, str]:
    """(served, why) for the operator's log: a refusal or an error means Recreate, which always works."""
    try:
        response = kube.call("POST", kube.core.create_namespaced_pod, namespace, probe_pod(namespace),
                             dry_run="All", _preload_content=False)
    except ApiException as e:
        reason = (e.reason or "").strip() or str(e.status)
        return False, f"the API server refused a pod with a RestartAllContainers rule ({e.status} {reason})"
    if keeps_restart_rules(json.loads(response.data)):
        return True, "the API server keeps RestartAllContainers rules"
    return False, "the API server drops container restart rules (ContainerRestartRules is off)"
