"""What the comparison measures, the same way for every engine.

``PodClock`` watches a namespace's pods (one raw watch, JSON lines parsed without the client's
model classes, so the observer costs little CPU beside the operators it times) and notes when N
pods exist and when N are Running. ``OperatorSample`` reads an operator process's CPU seconds
and RSS from /proc and its API request count from its own ``rest_client_requests_total``
(dpjob's and controller-runtime's share the name).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from dataclasses import dataclass

from kubernetes import client

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Reading:
    cpu_s: float
    rss_mb: float
    api_requests: float

    def minus(self, before: Reading) -> dict[str, float]:
        """CPU seconds and requests spent since ``before``; RSS as it is now."""
        return {"cpu_s": round(self.cpu_s - before.cpu_s, 3), "rss_mb": round(self.rss_mb, 1),
                "api_requests": self.api_requests - before.api_requests}


class OperatorSample:
    def __init__(self, pid: int, metrics_url: str) -> None:
        self.pid, self.metrics_url = pid, metrics_url

    def read(self) -> Reading:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
        rss = 0.0
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
        return Reading(cpu, rss, self._requests())

    def _requests(self) -> float:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("rest_client_requests_total{"))


class PodClock:
    """Seconds from ``start()`` (just before the work is submitted) to N pods created and Running."""

    def __init__(self, core: client.CoreV1Api, ns: str, n: int) -> None:
        self.core, self.ns, self.n = core, ns, n
        self.created: float | None = None
        self.running: float | None = None
        self._done = threading.Event()
        self._t0 = 0.0

    def start(self) -> None:
        version = self.core.list_namespaced_pod(self.ns, limit=1).metadata.resource_version
        self._t0 = time.perf_counter()
        threading.Thread(target=self._watch, args=(version,), daemon=True).start()

    def wait(self, timeout: float) -> tuple[float | None, float | None]:
        self._done.wait(timeout)
        self._done.set()
        return self.created, self.running

    def _watch(self, version: str) -> None:
        seen: set[str] = set()
        running: set[str] = set()
        while not self._done.is_set():
            resp = self.core.list_namespaced_pod(self.ns, watch=True, resource_version=version,
                                                 timeout_seconds=60, _preload_content=False)
            for line in resp:
                event = json.loads(line)
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                version = meta.get("resourceVersion") or version
                name = meta.get("name")
                if event.get("type") in ("ADDED", "MODIFIED") and name:
                    seen.add(name)
                    if (obj.get("status") or {}).get("phase") == "Running":
                        running.add(name)
                now = round(time.perf_counter() - self._t0, 3)
                if self.created is None and len(seen) >= self.n:
                    self.created = now
                if len(running) >= self.n:
                    self.running = now
                    self._done.set()
                    resp.close()
                    return


def delete_namespace(core: client.CoreV1Api, ns: str, timeout: float = 300) -> None:
    """Delete and wait until it is gone: the next run must not share the cluster with its cleanup."""
    core.delete_namespace(ns)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.read_namespace(ns)
        except client.ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.5)
