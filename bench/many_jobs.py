"""Many small jobs at once (issue 13): 200 jobs of 2 to 8 ranks applied together.

Each engine gets the same mix (job j has 2 + j % 7 ranks): the raw floor creates the same pods
itself; dpjob gets DataParallelJobs, Kubeflow PyTorchJobs. Measured: seconds to all pods created
and all Running, and each operator's reconcile time p50/p99 during the run, read from
``controller_runtime_reconcile_time_seconds`` (dpjob exports controller-runtime's name) as
Prometheus' ``histogram_quantile`` would compute them from the bucket increments. Beside it, the
p99 of the operator's API calls (client-go's ``rest_client_request_duration_seconds``, all verbs):
how much of a slow pass is the API server answering slowly; and the number of passes (the
quantiles are over passes, so skipping passes that would change nothing raises them).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from bench.bench_operator import job
from bench.measure import PodClock, RunMeter, delete_namespace

RECONCILE = "controller_runtime_reconcile_time_seconds_bucket{"
REQUESTS = "rest_client_request_duration_seconds_bucket{"


def sizes(jobs: int) -> list[int]:
    return [2 + j % 7 for j in range(jobs)]


def buckets(metrics_url: str, series: str = RECONCILE) -> dict[float, float]:
    """Cumulative bucket counts of the histogram ``series`` by upper bound, summed over its labels."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(series):
            labels, value = line.rsplit(" ", 1)
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + float(value)
    return out


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """``histogram_quantile(q, increase(...))``: linear within the bucket, the last finite bound for +Inf."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = bound, count
    return lower


def _submit(engine: str, core: client.CoreV1Api, custom: client.CustomObjectsApi,
            pytorchjob: Callable[[int], dict[str, Any]], raw_pod: Callable[[str, int], dict[str, Any]],
            ns: str, j: int, n: int) -> None:
    if engine == "raw":
        for i in range(n):
            body = raw_pod(ns, i)
            body["metadata"]["name"] = f"raw-{j}-{i}"
            _ = core.create_namespaced_pod(ns, body, _preload_content=False).data  # read: the connection is reused
    elif engine == "kubeflow":
        body = pytorchjob(n)
        body["metadata"]["name"] = f"j{j}"
        custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", body)
    else:
        body = job(f"j{j}", n)
        body["spec"]["runPolicy"] = {"gangScheduling": "Disabled" if engine == "dpjob-nogang" else "Auto"}
        custom.create_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs", body)


def run_many(engine: str, jobs: int, core: client.CoreV1Api, custom: client.CustomObjectsApi,
             meter: RunMeter, timeout: float, pytorchjob: Callable[[int], dict[str, Any]],
             raw_pod: Callable[[str, int], dict[str, Any]], ns: str) -> dict[str, Any]:
    """One engine's run of ``jobs`` jobs in namespace ``ns`` (created by the caller, deleted here)."""
    mix = sizes(jobs)
    sample = meter.operator(engine)
    try:
        hist = buckets(sample.metrics_url) if sample else {}  # its +Inf bucket: the passes so far
        calls = buckets(sample.metrics_url, REQUESTS) if sample else {}
        end = meter.begin(engine)
        clock = PodClock(core, ns, sum(mix))
        clock.start()
        with ThreadPoolExecutor(16) as pool:  # jobs arrive together, as from a pipeline's burst
            list(pool.map(lambda jn: _submit(engine, core, custom, pytorchjob, raw_pod, ns, *jn), enumerate(mix)))
        created, running = clock.wait(timeout)
        row: dict[str, Any] = {"engine": engine, "jobs": jobs, "ranks": sum(mix), "created_s": created,
                               "running_s": running, **end()}
        if sample:
            now = buckets(sample.metrics_url)
            row["reconcile_p50_s"] = quantile(0.5, hist, now)
            row["reconcile_p99_s"] = quantile(0.99, hist, now)
            row["reconcile_passes"] = now.get(float("inf"), 0.0) - hist.get(float("inf"), 0.0)
            row["api_call_p99_s"] = quantile(0.99, calls, buckets(sample.metrics_url, REQUESTS))
        return row
    finally:
        delete_namespace(core, ns)
