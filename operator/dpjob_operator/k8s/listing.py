"""Raw, label-selected lists and watches of one resource: the two calls a cache (``reflector``) is fed by.

Raw dicts, not the official client's models: deserialising a model per pod cost more CPU than
everything else a pass did, and a cache keeps only a few fields anyway.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from kubernetes.client.exceptions import ApiException

from dpjob_operator.api import constants as c
from dpjob_operator.k8s.client import KubeClient


class Resource(NamedTuple):
    """What a list or watch reads: pods or nodes (the core group, "") or a group's resource (jobs, Workloads)."""

    group: str
    version: str
    plural: str


PODS = Resource("", "v1", "pods")
NODES = Resource("", "v1", "nodes")  # cluster-scoped: every namespace argument is ignored
JOBS = Resource(c.GROUP, c.VERSION, c.PLURAL)


def _lister(kube: KubeClient, resource: Resource, namespace: str | None) -> Callable[..., Any]:
    """The official client's list call for ``resource`` in ``namespace`` (None: all namespaces)."""
    if resource == NODES:
        return kube.core.list_node
    if resource == PODS:
        return functools.partial(kube.core.list_namespaced_pod, namespace) if namespace \
            else kube.core.list_pod_for_all_namespaces
    group, version, plural = resource
    if namespace:
        return functools.partial(kube.custom.list_namespaced_custom_object, group, version, namespace, plural)
    return functools.partial(kube.custom.list_cluster_custom_object, group, version, plural)


def list_raw(kube: KubeClient, resource: Resource, label_selector: str = "",
             namespace: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """Every matching object as a raw dict, 500 a page; returns (items, the list's resourceVersion)."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"label_selector": label_selector, "limit": 500, "_preload_content": False}
    while True:
        data = json.loads(kube.call("GET", _lister(kube, resource, namespace), **kwargs).data)
        items.extend(data.get("items") or [])
        token = (data.get("metadata") or {}).get("continue")
        if not token:
            return items, data["metadata"]["resourceVersion"]
        kwargs["_continue"] = token


def watch_raw(kube: KubeClient, resource: Resource, label_selector: str, resource_version: str,
              namespace: str | None = None, timeout_seconds: int = 300) -> Iterator[dict[str, Any]]:
    """Yield raw watch events ({type, object}) from ``resource_version`` until the server closes the
    stream (after ``timeout_seconds``; the read deadline allows 30 s more)."""
    kwargs: dict[str, Any] = {"label_selector": label_selector, "watch": True,
                              "resource_version": resource_version, "allow_watch_bookmarks": True,
                              "timeout_seconds": timeout_seconds, "_preload_content": False,
                              "_request_timeout": (10, timeout_seconds + 30)}
    resp = kube.call("WATCH", _lister(kube, resource, namespace), **kwargs)
    buf = b""
    try:
        for chunk in resp.stream(65536, decode_content=False):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
    finally:
        resp.release_conn()


def may_list(kube: KubeClient, resource: Resource, label_selector: str, namespace: str | None = None) -> bool:
    """Whether this client may list ``resource`` there: one GET of one item; False on 403 (RBAC)."""
    try:
        kube.call("GET", _lister(kube, resource, namespace), label_selector=label_selector, limit=1,
                  _preload_content=False)
    except ApiException as e:
        if e.status == 403:
            return False
        raise
    return True
