"""Whether a job's namespace is being deleted. Read only when a running gang loses a rank.

Deleting a namespace deletes the rank pods first, or the job first, in no promised order. When
the pods go first, the job would read it as a rank deleted under a running gang and restart the
gang: a GangRestart event and a restart counted for a job that is going away, and pods POSTed
into a namespace that refuses them (403). Never written.
"""

from __future__ import annotations

from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.optional_read import FORBIDDEN, GONE, read_optional

_FORBIDDEN = "may not get namespaces (RBAC): a namespace being deleted may restart its gangs first"


def namespace_terminating(kube: KubeClient, name: str) -> bool:
    """True when the namespace is Terminating or gone; False when Active or not readable (403: an
    install without the permission restarts the gang as before, and says so once)."""
    code, body = read_optional(kube, kube.core.read_namespace, name, _FORBIDDEN)
    if code in (GONE, FORBIDDEN):
        return code == GONE
    return bool((body.get("status") or {}).get("phase") == "Terminating")
