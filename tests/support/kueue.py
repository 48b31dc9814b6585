"""Kueue for the tests: a real Kueue v0.17 in the dev cluster (devcluster/kueue.py), its objects
read and written through the official client, and the queue objects a test needs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
FLAVOR = "dpjob-kwok-cpu"
FLAVOR_NODE_LABELS = {"dpjob.io/pool": "cpu"}  # the dev cluster's simulated cpu pool


def objects(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create_cluster_scoped(api: client.ApiClient, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = objects(api).create_cluster_custom_object(GROUP, VERSION, plural, body)
    return out


def delete_cluster_scoped(api: client.ApiClient, plural: str, name: str) -> None:
    try:
        objects(api).delete_cluster_custom_object(GROUP, VERSION, plural, name)
    except client.ApiException as e:
        if e.status != 404:
            raise


def flavor(name: str = FLAVOR, node_labels: dict[str, str] | None = None,
           tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(FLAVOR_NODE_LABELS if node_labels is None else node_labels)}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor_name: str, cpu: str, memory: str = "64Gi", *,
                  preemption: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": flavor_name, "resources": [
            {"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory}]}]}],
    }
    if preemption:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(api: client.ApiClient, namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": cluster_queue_name}}
    out: dict[str, Any] = objects(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", body)
    return out


def priority_class(api: client.ApiClient, name: str, value: int) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value}
    try:
        create_cluster_scoped(api, "workloadpriorityclasses", body)
    except client.ApiException as e:
        if e.status != 409:
            raise


def workloads(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = objects(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "workloads")["items"]
    return items


def workload_of(api: client.ApiClient, namespace: str, job_uid: str) -> dict[str, Any] | None:
    """The Workload whose controller owner is the job with ``job_uid``, if any."""
    for wl in workloads(api, namespace):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("uid") == job_uid and o.get("controller") for o in owners):
            return wl
    return None


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def cluster_queue_usage(api: client.ApiClient, name: str) -> Iterator[tuple[str, str]]:
    cq = objects(api).get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
    for flavor_usage in (cq.get("status") or {}).get("flavorsUsage") or []:
        for resource in flavor_usage.get("resources") or []:
            yield resource["name"], str(resource.get("total", "0"))
