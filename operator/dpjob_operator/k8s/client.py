"""The only place that talks to the Kubernetes API server.

Every call may go through a client-side token bucket (off unless ``apiQPS`` > 0), is counted in
``rest_client_requests_total``, and maps the status codes a reconciler expects (404 on delete,
409 on create) to plain results instead of exceptions. The official client is synchronous;
callers run these methods in a bounded thread pool.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.response import BaseHTTPResponse

from dpjob_operator import metrics
from dpjob_operator.api import constants as c
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.ratelimit import MAX_THROTTLED_RETRIES, limiter, retry_after

# (connect, read) seconds for every API call; watches set their own, longer read timeout.
REQUEST_TIMEOUT = (10, 30)

log = logging.getLogger("dpjob.k8s")


class KubeClient:
    def __init__(self, api: client.ApiClient, qps: float, burst: int) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._bucket = limiter(qps, burst)

    def _call(self, verb: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # client-go's rule: no call without a deadline. A hung TCP connection (an API server that
        # vanished behind a load balancer) would otherwise hold a worker forever.
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        for attempt in range(MAX_THROTTLED_RETRIES + 1):
            if self._bucket is not None:
                metrics.RATE_LIMITER_WAIT.labels(verb).observe(self._bucket.acquire())
            started = time.monotonic()
            try:
                result = fn(*args, **kwargs)
            except ApiException as e:
                metrics.REQUEST_DURATION.labels(verb).observe(time.monotonic() - started)
                metrics.REST_REQUESTS.labels(str(e.status), verb).inc()
                delay = retry_after(e.status, e.headers)
                if delay is None or attempt == MAX_THROTTLED_RETRIES:
                    raise
                # 429 from API Priority and Fairness: the server says when; wait that long (client-go
                # does the same), a bounded number of times, then let the worker's backoff take over.
                log.info("API server throttled %s (429); retrying in %.1fs", verb, delay)
                time.sleep(delay)
                continue
            except Exception:
                metrics.REST_REQUESTS.labels("<error>", verb).inc()
                raise
            if verb != "WATCH" and isinstance(result, BaseHTTPResponse):
                # Read the body now, even when the caller does not want it: urllib3 gives a
                # connection back to its pool only once its response is read to the end. Unread,
                # every create/delete/event opened a new TLS connection (~45 a second under 200
                # jobs: 8% of the API server's CPU went to handshakes) and left the old one to the GC.
                _ = result.data
            metrics.REQUEST_DURATION.labels(verb).observe(time.monotonic() - started)
            metrics.REST_REQUESTS.labels("200", verb).inc()
            return result
        raise AssertionError("unreachable")

    call = _call  # the same, for the k8s modules beside this one (jobs.py)

    # ---- pods ---------------------------------------------------------------------------

    def create_pod(self, pod: Mapping[str, Any]) -> bool:
        """Create a pod; False if it already exists (a previous pass or operator made it)."""
        try:
            self._call("POST", self.core.create_namespaced_pod, pod["metadata"]["namespace"], pod,
                       _preload_content=False)
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    def read_raw(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A Pod, Service or ConfigMap as a raw dict; None when it does not exist."""
        readers: dict[str, Callable[..., Any]] = {"Pod": self.core.read_namespaced_pod,
                                                  "Service": self.core.read_namespaced_service,
                                                  "ConfigMap": self.core.read_namespaced_config_map}
        return self._read(readers[kind], name, namespace)

    def _read(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        """One GET through ``fn``, as a raw dict; None on 404."""
        try:
            resp = self._call("GET", fn, *args, _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        body: dict[str, Any] = json.loads(resp.data)
        return body

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None, uid: str | None = None) -> bool:
        """Delete the pod ``name``; with ``uid``, only if it is still that pod (a precondition), as the
        kubelet does: a rank pod's name comes back with the next gang, and a delete planned from a
        trailing cache must not hit the new pod. False: that pod is gone already."""
        try:
            preconditions = client.V1Preconditions(uid=uid) if uid else None
            body = client.V1DeleteOptions(grace_period_seconds=grace_seconds, propagation_policy="Background",
                                          preconditions=preconditions)
            self._call("DELETE", self.core.delete_namespaced_pod, name, namespace, body=body,
                       _preload_content=False)
            return True
        except ApiException as e:
            if e.status == 404 or (e.status == 409 and uid):
                return False
            raise

    # ---- services and configmaps -----------------------------------------------------

    def create_if_absent(self, obj: Mapping[str, Any]) -> bool:
        kind = obj["kind"]
        ns = obj["metadata"]["namespace"]
        creators: dict[str, Callable[..., Any]] = {"Service": self.core.create_namespaced_service,
                                                   "ConfigMap": self.core.create_namespaced_config_map}
        fn = creators[kind]
        try:
            self._call("POST", fn, ns, obj, _preload_content=False)
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    def patch_configmap_data(self, obj: Mapping[str, Any]) -> None:
        """Replace an existing ConfigMap's data (a merge patch: owner references and labels stay)."""
        self._call("PATCH", self.core.patch_namespaced_config_map, obj["metadata"]["name"],
                   obj["metadata"]["namespace"], {"data": obj["data"]}, _preload_content=False)

    # ---- gang scheduling: scheduling.k8s.io Workloads and PodGroups ------------------------

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` in ``group/version`` (discovery, one GET)."""
        try:
            resp = self._call("GET", self.custom.get_api_resources, group, version, _preload_content=False)
        except ApiException as e:
            if e.status in (403, 404):
                return False
            raise
        return any(r.get("name") == plural for r in json.loads(resp.data).get("resources") or [])

    def get_object(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)

    def create_object(self, group: str, version: str, plural: str, obj: Mapping[str, Any]) -> bool:
        """Create; False when it already exists."""
        try:
            self._call("POST", self.custom.create_namespaced_custom_object, group, version,
                       obj["metadata"]["namespace"], plural, obj, _preload_content=False)
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    def list_objects(self, group: str, version: str, plural: str, namespace: str,
                     label_selector: str) -> list[dict[str, Any]]:
        try:
            resp = self._call("GET", self.custom.list_namespaced_custom_object, group, version, namespace, plural,
                              label_selector=label_selector, _preload_content=False)
        except ApiException as e:
            if e.status == 404:  # the API is not served (any more): nothing of ours can exist
                return []
            raise
        items: list[dict[str, Any]] = json.loads(resp.data).get("items") or []
        return items

    def delete_object(self, group: str, version: str, plural: str, namespace: str, name: str) -> bool:
        try:
            self._call("DELETE", self.custom.delete_namespaced_custom_object, group, version, namespace, plural,
                       name, propagation_policy="Background", _preload_content=False)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def patch_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                     patch: Mapping[str, Any], status: bool = False) -> None:
        """A JSON merge patch (RFC 7386) of the object, or of its status subresource; a resourceVersion in
        the patch's metadata makes it conditional (409 when the object changed since)."""
        fn = self.custom.patch_namespaced_custom_object_status if status else self.custom.patch_namespaced_custom_object
        self._call("PATCH", fn, group, version, namespace, plural, name, patch,
                   _content_type="application/merge-patch+json", _preload_content=False)

    # ---- cluster-scoped objects (Kueue's ResourceFlavors, priority classes) ---------------

    def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        return self._read(self.custom.get_cluster_custom_object, group, version, plural, name)

    def list_cluster_objects(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        resp = self._call("GET", self.custom.list_cluster_custom_object, group, version, plural,
                          _preload_content=False)
        items: list[dict[str, Any]] = json.loads(resp.data).get("items") or []
        return items

    # ---- the job --------------------------------------------------------------------------

    def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any],
                         resource_version: str | None = None) -> dict[str, Any]:
        """Merge-patch the status subresource; returns the job as the server stored it.

        With ``resource_version`` the patch is a precondition: the server answers 409 if the job
        changed since it was read, or was deleted and re-created under the same name (a
        resourceVersion is an etcd revision, never reused), so a decision made from an old view is
        never written over a newer one.
        """
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        resp = self._call("PATCH", self.custom.patch_namespaced_custom_object_status, c.GROUP, c.VERSION,
                          namespace, c.PLURAL, name, body, _preload_content=False)
        stored: dict[str, Any] = json.loads(resp.data)
        return stored

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self._call("DELETE", self.custom.delete_namespaced_custom_object, c.GROUP, c.VERSION, namespace,
                       c.PLURAL, name, propagation_policy="Background", _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise

    def post_event(self, job: Mapping[str, Any], type_: str, reason: str, message: str,
                   at: datetime | None = None) -> None:
        """A core/v1 Event on the job (what `kubectl describe dpj` shows), stamped ``at`` (now)."""
        meta = job["metadata"]
        now = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message[:1024], "type": type_,
            "source": {"component": c.MANAGED_BY}, "reportingComponent": c.MANAGED_BY,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self._call("POST", self.core.create_namespaced_event, meta["namespace"], event, _preload_content=False)
        except ApiException as e:  # an event is never worth failing a reconcile for
            # The namespace is being deleted (events queued behind the pass outlive it): expected, quiet.
            level = logging.DEBUG if errors.is_namespace_terminating(e) else logging.WARNING
            log.log(level, "could not post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], e.reason)
