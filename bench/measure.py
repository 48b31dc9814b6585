"""What the comparison measures, the same way for every engine.

``PodClock`` watches a namespace's pods (one raw watch, JSON lines parsed without the client's
model classes, so the observer costs little CPU beside the operators it times) and notes when N
pods exist and when N are Running. ``OperatorSample`` reads an operator process's CPU seconds
and RSS (now and peak) from /proc and its API request count from its own
``rest_client_requests_total`` (dpjob's and controller-runtime's share the name).
``apiserver_requests`` reads the API server's own ``apiserver_request_total``: every client's
requests (operators, kube-scheduler, kwok, the benchmark), the load the control plane really saw;
``store_state`` the size of its store when a run began.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Reading:
    cpu_s: float
    rss_mb: float
    peak_rss_mb: float
    api_requests: float
    by_call: Mapping[str, float] = field(default_factory=dict)  # "POST 409" -> count

    def minus(self, before: Reading) -> dict[str, Any]:
        """CPU seconds and requests spent since ``before`` (also by method and status code: a 409
        on POST is a pod created twice); RSS as it is now and the process's peak so far (VmHWM:
        scenarios grow, so the peak after a scenario is its own in practice)."""
        calls = {k: v - before.by_call.get(k, 0.0) for k, v in self.by_call.items()}
        return {"cpu_s": round(self.cpu_s - before.cpu_s, 3), "rss_mb": round(self.rss_mb, 1),
                "peak_rss_mb": round(self.peak_rss_mb, 1), "api_requests": self.api_requests - before.api_requests,
                "operator_calls": {k: v for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v > 0}}


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


class OperatorSample:
    def __init__(self, pid: int, metrics_url: str) -> None:
        self.pid, self.metrics_url = pid, metrics_url

    def read(self) -> Reading:
        cpu = cpu_seconds(self.pid) or 0.0
        kib = {"VmRSS:": 0, "VmHWM:": 0}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                key = line.split(" ", 1)[0].split("\t", 1)[0]
                if key in kib:
                    kib[key] = int(line.split()[1])
        calls = self._requests()
        return Reading(cpu, kib["VmRSS:"] / 1024, kib["VmHWM:"] / 1024, sum(calls.values()), calls)

    def _requests(self) -> dict[str, float]:
        """``rest_client_requests_total`` by "METHOD code" (dpjob's and controller-runtime's alike)."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            text = r.read().decode()
        calls: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("rest_client_requests_total{"):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                key = f"{labels.get('method')} {labels.get('code')}"
                calls[key] = calls.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        return calls


def apiserver_metrics(core: client.CoreV1Api) -> str:
    """The API server's own /metrics, as text."""
    api = core.api_client
    method, url, headers, body, post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers, body, post, _request_timeout=30)
    response.read()
    return str(response.data.decode())


def apiserver_requests(metrics: str) -> dict[str, float]:
    """The API server's ``apiserver_request_total`` by verb and resource (``"POST pods"``,
    ``"PATCH dataparalleljobs/status"``), summed over codes."""
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = f"{labels.get('verb')} {labels.get('resource', '')}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else "")
            counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def store_state(metrics: str) -> dict[str, float]:
    """How big the store is: etcd's database file (``apiserver_storage_size_bytes``, MB) and the
    objects it holds (``apiserver_storage_objects``, every resource), so that runs of different
    sessions can be told apart. The database grows ~45 MB per 200-job run and is never
    defragmented here; eight such runs (23 to 345 MB) took the same time, so it is recorded, not
    corrected for."""
    size = objects = 0.0
    for line in metrics.splitlines():
        if line.startswith("apiserver_storage_size_bytes"):
            size += float(line.rsplit(" ", 1)[1])
        elif line.startswith("apiserver_storage_objects{"):
            objects += max(0.0, float(line.rsplit(" ", 1)[1]))  # -1: not yet counted
    return {"etcd_db_mb": round(size / 2**20, 1), "stored_objects": objects}


def _top(after: dict[str, float], before: dict[str, float], n: int = 12) -> dict[str, float]:
    """The ``n`` commonest requests during a run (watches excluded: they are long-lived)."""
    grown = {k: v - before.get(k, 0.0) for k, v in after.items() if not k.startswith("WATCH")}
    return dict(sorted(((k, v) for k, v in grown.items() if v > 0), key=lambda kv: -kv[1])[:n])


class RunMeter:
    """Everything measured around one run: begun just before the work, ended just after it.

    The operator's own cost (``OperatorSample``), the API server's request count, and the CPU
    seconds of every control-plane process (``control_plane``: name -> pid, the dev cluster's
    etcd, kube-apiserver, kube-scheduler, kwok, ...), which says where the time went."""

    def __init__(self, core: client.CoreV1Api, operators: Mapping[str, OperatorSample],
                 control_plane: Mapping[str, int]) -> None:
        self.core, self.operators, self.control_plane = core, operators, control_plane

    def operator(self, engine: str) -> OperatorSample | None:
        return self.operators.get(engine.split("-")[0])

    def _cpu(self) -> dict[str, float]:
        got = {name: cpu_seconds(pid) for name, pid in self.control_plane.items()}
        return {name: cpu for name, cpu in got.items() if cpu is not None}

    def begin(self, engine: str) -> Callable[[], dict[str, Any]]:
        """Read everything now; the returned function reads again and gives the differences."""
        sample = self.operator(engine)
        before = sample.read() if sample else None
        metrics = apiserver_metrics(self.core)
        cpu, server, store = self._cpu(), apiserver_requests(metrics), store_state(metrics)

        def end() -> dict[str, Any]:
            now = apiserver_requests(apiserver_metrics(self.core))
            row: dict[str, Any] = {"apiserver_requests": sum(now.values()) - sum(server.values()),
                                   "apiserver_top": _top(now, server), **store}
            row.update({f"cpu_{name}_s": round(now - cpu[name], 3) for name, now in self._cpu().items() if name in cpu})
            if sample and before:
                row.update(sample.read().minus(before))
            return row
        return end


class PodClock:
    """Seconds from ``start()`` (just before the work is submitted) to N pods created and Running.

    Pods are counted by UID, and those in ``ignore`` (a gang that was there before) not at all:
    a restarted gang's pods keep their names."""

    def __init__(self, core: client.CoreV1Api, ns: str, n: int, ignore: frozenset[str] = frozenset()) -> None:
        self.core, self.ns, self.n, self.ignore = core, ns, n, ignore
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
                uid = meta.get("uid")
                if event.get("type") in ("ADDED", "MODIFIED") and uid and uid not in self.ignore:
                    seen.add(uid)
                    if (obj.get("status") or {}).get("phase") == "Running":
                        running.add(uid)
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
