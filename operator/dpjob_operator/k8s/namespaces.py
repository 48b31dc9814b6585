"""Whether a job's namespace is being deleted. Read only when a running gang loses a rank.

Deleting a namespace deletes the rank pods first, or the job first, in no promised order. When
the pods go first, the job would read it as a rank deleted under a running gang and restart the
gang: a GangRestart event and a restart counted for a job that is going away, and pods POSTed
into a namespace that refuses them (403). Never written.
"""

from __future__ import annotations

import json
import logging

from kubernetes.client.exceptions import ApiException

from dpjob_operator.k8s.client import KubeClient

log = logging.getLogger("dpjob.k8s")
_warned_forbidden = False


def namespace_terminating(kube: KubeClient, name: str) -> bool:
    """True when the namespace is Terminating or gone; False when Active or not readable (403: an
    install without the permission restarts the gang as before, and says so once)."""
    global _warned_forbidden
    try:
        resp = kube.call("GET", kube.core.read_namespace, name, _preload_content=False)
    except ApiException as e:
        if e.status == 404:
            return True
        if e.status == 403:
            if not _warned_forbidden:
                log.warning("may not get namespaces (RBAC): a namespace being deleted may restart its gangs first")
                _warned_forbidden = True
            return False
        raise
    return bool((json.loads(resp.data).get("status") or {}).get("phase") == "Terminating")
