"""Listing DataParallelJobs by identity only: what the controller's job sweep compares its cache to."""

from __future__ import annotations

import json
from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.k8s.client import KubeClient

JobKey = tuple[str, str]


def job_uids(kube: KubeClient, namespace: str | None = None) -> dict[JobKey, str]:
    """(namespace, name) -> uid of every job in ``namespace`` (all namespaces when None), paginated."""
    found: dict[JobKey, str] = {}
    kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False}
    while True:
        if namespace:
            resp = kube.call("GET", kube.custom.list_namespaced_custom_object, c.GROUP, c.VERSION, namespace,
                             c.PLURAL, **kwargs)
        else:
            resp = kube.call("GET", kube.custom.list_cluster_custom_object, c.GROUP, c.VERSION, c.PLURAL, **kwargs)
        data = json.loads(resp.data)
        for item in data.get("items") or []:
            meta = item.get("metadata") or {}
            found[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = str(meta.get("uid", ""))
        token = (data.get("metadata") or {}).get("continue")
        if not token:
            return found
        kwargs["_continue"] = token
