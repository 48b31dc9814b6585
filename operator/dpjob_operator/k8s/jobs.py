"""Listing DataParallelJobs by identity only: what the controller's job sweep compares its cache to."""

from __future__ import annotations

from dpjob_operator.api import constants as c
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.listing import Resource, list_raw

JobKey = tuple[str, str]
JOBS = Resource(c.GROUP, c.VERSION, c.PLURAL)


def job_uids(kube: KubeClient, namespace: str | None = None) -> dict[JobKey, str]:
    """(namespace, name) -> uid of every job in ``namespace`` (all namespaces when None), paginated."""
    found: dict[JobKey, str] = {}
    for item in list_raw(kube, JOBS, namespace=namespace)[0]:
        meta = item.get("metadata") or {}
        found[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = str(meta.get("uid", ""))
    return found
