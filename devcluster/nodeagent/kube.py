"""A thin raw-JSON client on top of the official ``kubernetes`` client's ApiClient (auth, TLS).

The agent deals in plain dicts (camelCase, as on the wire): simpler to patch status with and free of
model (de)serialization quirks.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterator, Optional
from urllib.parse import quote

log = logging.getLogger("nodeagent.kube")


class KubeError(Exception):
    def __init__(self, status: int, body: str, what: str = ""):
        self.status = status
        self.body = body
        try:
            self.message = json.loads(body).get("message", body)
        except ValueError:
            self.message = body
        super().__init__(f"{what}: HTTP {status}: {self.message}")


class Kube:
    def __init__(self, kubeconfig: str):
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.api = client.ApiClient(cfg)

    def request(self, method: str, path: str, query: Optional[dict[str, Any]] = None, body: Any = None,
                content_type: str = "application/json", timeout: float = 30.0, stream: bool = False):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items()
                  if v is not None]
        method_, url, headers, body_, post = self.api.param_serialize(
            method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(method_, url, headers, body_, post, _request_timeout=timeout)
        if stream:
            if resp.status >= 400:
                raise KubeError(resp.status, resp.read().decode(errors="replace"), f"{method} {path}")
            return resp.response
        data = resp.read()
        if resp.status >= 400:
            raise KubeError(resp.status, data.decode(errors="replace"), f"{method} {path}")
        return json.loads(data) if data else None

    # ------------------------------------------------------------------ helpers

    def get(self, path: str, **query) -> Optional[dict]:
        """GET; None on 404."""
        try:
            return self.request("GET", path, query)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def merge_patch(self, path: str, body: dict) -> dict:
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300, **query) -> Iterator[dict]:
        """Events of a watch (dicts with type and object); raises KubeError(410) on an expired version."""
        resp = self.request("GET", path, dict(query, watch=True, resourceVersion=resource_version,
                                              allowWatchBookmarks=True, timeoutSeconds=timeout_seconds),
                            timeout=(10, timeout_seconds + 30), stream=True)
        try:
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        raise KubeError(int(obj.get("code") or 500), json.dumps(obj), f"watch {path}")
                    yield event
        finally:
            resp.release_conn()


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}" + (f"/{sub}" if sub else "")
