"""Reading an object the operator may not be allowed to read, or that may be gone.

The operator reads nodes (for ranks stuck Terminating) and namespaces (before restarting a gang
that lost a rank) only to decide better; a namespaced install may lack the permission. Such a
read must never fail the pass: 404 and 403 are answers, and a missing permission is said once
per process (per kind of read), not on every pass. Never written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from dpjob_operator.k8s.client import KubeClient

log = logging.getLogger("dpjob.k8s")
_warned: set[str] = set()

FOUND, GONE, FORBIDDEN = 200, 404, 403


def read_optional(kube: KubeClient, read: Callable[..., Any], name: str,
                  forbidden_warning: str) -> tuple[int, dict[str, Any]]:
    """(FOUND, the object), (GONE, {}) or (FORBIDDEN, {}); other errors are raised. On the first
    403 for this ``forbidden_warning`` it is logged, as what the install gives up without it."""
    try:
        resp = kube.call("GET", read, name, _preload_content=False)
    except ApiException as e:
        if e.status == GONE:
            return GONE, {}
        if e.status == FORBIDDEN:
            if forbidden_warning not in _warned:
                _warned.add(forbidden_warning)
                log.warning("%s", forbidden_warning)
            return FORBIDDEN, {}
        raise
    body: dict[str, Any] = json.loads(resp.data)
    return FOUND, body
