"""Small helpers for tests that drive DataParallelJobs through the real API server."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from tests.helpers import kubectl, wait_for

GROUP, VERSION, PLURAL = "dpjob.io", "v1alpha1", "dataparalleljobs"


def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def get(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def patch(api: client.ApiClient, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)


def delete(api: client.ApiClient, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def status(api, namespace, name) -> dict[str, Any]:
    return get(api, namespace, name).get("status") or {}


def wait_phase(api, namespace: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(f"{namespace}/{name} phase {phase}",
                    lambda: (lambda s: s if s.get("phase") == phase else None)(status(api, namespace, name)),
                    timeout=timeout)


def rank_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"dpjob.io/job-name={name}").items
    return sorted(pods, key=lambda p: int(p.metadata.labels["dpjob.io/rank"]))


def env_of(pod: client.V1Pod, container: str = "trainer") -> dict[str, str]:
    ctr = next(c for c in pod.spec.containers if c.name == container)
    return {e.name: e.value for e in ctr.env or []}


def events(namespace: str, name: str) -> list[dict[str, Any]]:
    out = kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}", "-o", "json")
    return json.loads(out.stdout)["items"]
