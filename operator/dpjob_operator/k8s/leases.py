"""The leader-election Lease on the API server: read, create, replace at a resourceVersion.

Why apart from ``client.KubeClient``: a renewal must never wait behind the operator's own work.
These calls skip the client-side token bucket (200 pod creations in flight would delay a renewal
past its deadline), use their own connection pool, and have a short timeout of their own: a
renewal that hangs longer than the renew deadline is worth nothing. Optimistic concurrency is
the API server's: a replace carries the resourceVersion it was decided from, and a 409 means
another candidate wrote first (``LeaseConflict``), never an error to retry blindly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dpjob_operator import metrics

# (connect, read) seconds: well inside the renew deadline (10 s), so a hung call leaves time to retry.
LEASE_REQUEST_TIMEOUT = (3, 5)
_ALL = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_ONE = _ALL + "/{name}"


class LeaseConflict(Exception):
    """409: the Lease changed since we read it (or was created meanwhile): we lost the race."""


@dataclass(frozen=True)
class StoredLease:
    spec: dict[str, Any]
    resource_version: str


class LeaseClient:
    """One Lease, ``namespace/name``.

    Raw JSON in and out, not the client's typed ``V1Lease``: the typed call re-serializes
    ``acquireTime``/``renewTime`` through ``datetime.isoformat()``, which drops the fraction when
    the microseconds are 0 (``...T03:00:00+00:00``), and the API server's MicroTime refuses a time
    without its six digits. We write ``2026-11-24T03:00:00.000000Z`` ourselves (api/timestamps.py).
    """

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        self._api = api

    def get(self) -> StoredLease | None:
        """The Lease as stored; None when there is none yet."""
        try:
            return self._request("GET", _ONE)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def create(self, spec: Mapping[str, Any]) -> StoredLease:
        """Create the Lease; ``LeaseConflict`` when another candidate created it first."""
        return self._request("POST", _ALL, self._body(spec, None))

    def replace(self, spec: Mapping[str, Any], resource_version: str) -> StoredLease:
        """Replace the Lease's spec, only if it is still at ``resource_version`` (else ``LeaseConflict``)."""
        return self._request("PUT", _ONE, self._body(spec, resource_version))

    def write(self, spec: Mapping[str, Any], resource_version: str | None) -> StoredLease:
        """``create`` when there was no Lease (``resource_version`` None), else ``replace``."""
        return self.create(spec) if resource_version is None else self.replace(spec, resource_version)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> StoredLease:
        serialized = self._api.param_serialize(
            method=method, resource_path=path, path_params={"namespace": self.namespace, "name": self.name},
            header_params={"Accept": "application/json", "Content-Type": "application/json"}, body=body,
            auth_settings=["BearerToken"])
        try:
            resp = self._api.call_api(*serialized, _request_timeout=LEASE_REQUEST_TIMEOUT)
            raw = resp.read()
            if not 200 <= resp.status <= 299:
                raise ApiException.from_response(http_resp=resp, body=None, data=None)
        except ApiException as e:
            metrics.REST_REQUESTS.labels(str(e.status), method).inc()
            if e.status == 409:
                raise LeaseConflict(f"lease {self.namespace}/{self.name} changed meanwhile") from e
            raise
        except Exception:
            metrics.REST_REQUESTS.labels("<error>", method).inc()
            raise
        metrics.REST_REQUESTS.labels(str(resp.status), method).inc()
        lease = json.loads(raw)
        return StoredLease(lease.get("spec") or {}, lease["metadata"]["resourceVersion"])

    def _body(self, spec: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": dict(spec)}
