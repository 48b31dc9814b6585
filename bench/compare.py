"""The same work through the raw API client, dpjob and Kubeflow's training-operator, side by side.

One run, one cluster (the dev cluster's control plane and kwok nodes), alternating the order of
the engines in every repetition so that none always runs on a warmer or busier cluster:

- **raw**: N pods created directly by 32 client threads: the floor any operator pays on top of;
- **dpjob**: a DataParallelJob of N ranks, gang scheduling on (a PodGroup) and off;
- **kubeflow**: a PyTorchJob (1 Master + N-1 Workers) on the real training-operator v1.8.1 at its
  defaults (1 worker thread, QPS 20, burst 30; bench/kubeflow.py).

Scenarios: one job of N ranks for each ``--sizes``, and ``--jobs`` jobs of 2 to 8 ranks applied at
once (bench/many_jobs.py: also each operator's reconcile time p50/p99).

For each: seconds from apply to all N pods created and to all N Running (kwok), and, for the two
operators, CPU seconds and RSS of the operator process (/proc) and the API requests it made (its
own ``rest_client_requests_total``). Medians and spread (min-max) over the repetitions; ratios
dpjob / raw and Kubeflow / dpjob. Writes bench/results/compare.json and compare.md.

Run: ``make bench-compare`` or ``python bench/compare.py --sizes 64,512 --reps 3``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402

from bench.bench_operator import BENCH_LABEL, ensure_nodes, job  # noqa: E402
from bench.kubeflow import TrainingOperator  # noqa: E402
from bench.many_jobs import run_many  # noqa: E402
from bench.measure import OperatorSample, PodClock, delete_namespace  # noqa: E402
from tests.support.cluster import kubectl  # noqa: E402
from tests.support.operator import OperatorProcess  # noqa: E402
from tests.support.paths import DEVCLUSTER, KUBECONFIG  # noqa: E402

ENGINES = ("raw", "dpjob", "dpjob-nogang", "kubeflow")
RAW_THREADS = 32


def pod(ns: str, i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"raw-{i}", "namespace": ns},
            "spec": {"nodeSelector": {BENCH_LABEL: "true"},
                     "containers": [{"name": "trainer", "image": "bench", "command": ["sleep", "inf"]}]}}


def submit_raw(core: client.CoreV1Api, ns: str, n: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(RAW_THREADS) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(ns, pod(ns, i), _preload_content=False), range(n)))


def pytorchjob(n: int) -> dict[str, Any]:
    def replicas(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {
            "nodeSelector": {BENCH_LABEL: "true"},
            "containers": [{"name": "pytorch", "image": "bench", "command": ["sleep", "inf"]}]}}}
    specs = {"Master": replicas(1)}
    if n > 1:
        specs["Worker"] = replicas(n - 1)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "cmp"},
            "spec": {"pytorchReplicaSpecs": specs}}


def submitter(engine: str, core: client.CoreV1Api, custom: client.CustomObjectsApi) -> Callable[[str, int], None]:
    if engine == "raw":
        return lambda ns, n: submit_raw(core, ns, n)
    if engine == "kubeflow":
        return lambda ns, n: custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs",
                                                                    pytorchjob(n))

    def dpjob(ns: str, n: int) -> None:
        body = job("cmp", n)
        body["spec"]["runPolicy"] = {"gangScheduling": "Disabled" if engine == "dpjob-nogang" else "Auto"}
        custom.create_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs", body)
    return dpjob


def run_once(engine: str, n: int, core: client.CoreV1Api, custom: client.CustomObjectsApi,
             operators: dict[str, OperatorSample], timeout: float) -> dict[str, Any]:
    ns = _namespace(core, f"cmp-{engine}-{n}")
    sample = operators.get(engine.split("-")[0])
    try:
        before = sample.read() if sample else None
        clock = PodClock(core, ns, n)
        clock.start()
        submitter(engine, core, custom)(ns, n)
        created, running = clock.wait(timeout)
        row: dict[str, Any] = {"scenario": f"1 job x {n}", "engine": engine, "ranks": n, "created_s": created,
                               "running_s": running}
        if sample and before:
            row.update(sample.read().minus(before))
        return row
    finally:
        delete_namespace(core, ns)


def _namespace(core: client.CoreV1Api, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    return ns


def median_spread(values: list[float | None]) -> dict[str, float | None]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "min": None, "max": None, "missing": len(values)}
    return {"median": round(statistics.median(got), 3), "min": round(min(got), 3), "max": round(max(got), 3),
            "missing": len(values) - len(got)}


METRICS = ("created_s", "running_s", "cpu_s", "rss_mb", "api_requests", "reconcile_p50_s", "reconcile_p99_s")


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and spread per (scenario, engine), scenarios in the order they ran."""
    out = []
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        for engine in ENGINES:
            runs = [r for r in rows if r["scenario"] == scenario and r["engine"] == engine]
            if not runs:
                continue
            entry: dict[str, Any] = {"scenario": scenario, "ranks": runs[0]["ranks"], "engine": engine,
                                     "runs": len(runs)}
            for key in METRICS:
                if any(key in r for r in runs):
                    entry[key] = median_spread([r.get(key) for r in runs])
            out.append(entry)
    return out


def _cell(entry: dict[str, Any] | None, key: str, digits: int = 2) -> str:
    stat = (entry or {}).get(key)
    if not stat or stat["median"] is None:
        return "-"
    return f"{stat['median']:.{digits}f} ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> str:
    x, y = ((a or {}).get(key) or {}).get("median"), ((b or {}).get(key) or {}).get("median")
    return f"{x / y:.2f}x" if x and y else "-"


def markdown(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Run {meta['date']} on {meta['machine']}; {meta['reps']} repetitions, engine order rotated; "
             "median (min-max) seconds.", "",
             "| scenario | engine | all created | all Running | created vs raw | Running: kubeflow / dpjob "
             "| operator CPU s | operator RSS MB | API requests | reconcile p50 / p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for entry in summary:
        same = {e["engine"]: e for e in summary if e["scenario"] == entry["scenario"]}
        vs_raw = _ratio(entry, same.get("raw"), "created_s") if entry["engine"] != "raw" else "1.00x"
        kf = _ratio(same.get("kubeflow"), same.get("dpjob"), "running_s") if entry["engine"] == "kubeflow" else ""
        p50, p99 = ((entry.get(k) or {}).get("median") for k in ("reconcile_p50_s", "reconcile_p99_s"))
        latency = f"{p50 * 1000:.0f} / {p99 * 1000:.0f}" if p50 is not None and p99 is not None else "-"
        lines.append(f"| {entry['scenario']} | {entry['engine']} | {_cell(entry, 'created_s')} | "
                     f"{_cell(entry, 'running_s')} | {vs_raw} | {kf} | {_cell(entry, 'cpu_s')} | "
                     f"{_cell(entry, 'rss_mb', 0)} | {_cell(entry, 'api_requests', 0)} | {latency} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import platform
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the operators
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64,512", help="ranks per job, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--jobs", type=int, default=200, help="jobs of 2-8 ranks applied at once (0: skip)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run before it counts as missing")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    sizes = [int(s) for s in args.sizes.split(",")]
    config.load_kube_config(str(KUBECONFIG))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    ensure_nodes(core, "cpu", max(2, -(-max(sizes) // 900)), {})
    from devcluster import stack

    chart_replicas = stack.operator_replicas()
    stack.scale_operator(0)  # the chart's operator would share the work (and the Lease) with ours
    logs = DEVCLUSTER / "logs"
    ours = OperatorProcess(KUBECONFIG, logs / "operator-compare.log")
    peer = TrainingOperator(kubectl, KUBECONFIG, logs / "training-operator-compare.log") \
        if "kubeflow" in engines else None
    rows: list[dict[str, Any]] = []
    try:
        ours.start()
        operators = {"dpjob": OperatorSample(ours.proc.pid, f"http://127.0.0.1:{ours.metrics_port}/metrics")}
        if peer:
            peer.start()
            operators["kubeflow"] = OperatorSample(peer.proc.pid, peer.metrics_url)
        for n in sizes:
            for rep in range(args.reps):
                order = engines[rep % len(engines):] + engines[:rep % len(engines)]
                for engine in order:
                    row = run_once(engine, n, core, custom, operators, args.timeout)
                    row["rep"] = rep
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        for rep in range(args.reps if args.jobs else 0):
            order = engines[rep % len(engines):] + engines[:rep % len(engines)]
            for engine in order:
                ns = _namespace(core, f"many-{engine}")
                row = run_many(engine, args.jobs, core, custom, operators, args.timeout, pytorchjob, pod, ns)
                row.update(scenario=f"{args.jobs} jobs x 2-8", rep=rep)
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        ours.stop()
        if peer:
            peer.stop()
        if chart_replicas:
            stack.scale_operator(chart_replicas)  # the chart's operator takes the cluster back
        kubectl("delete", "nodes", "-l", f"{BENCH_LABEL}=true", "--wait=false")  # ours: leave the pools as found
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {_cores()} cores, "
            f"{platform.system()} {platform.release()}", "reps": args.reps,
            "kubeflow": {"version": "v1.8.1", **(peer.settings if peer else {})},
            "dpjob": {"qps": 100, "burst": 200, "create_concurrency": 32, "workers": 8}}
    summary = summarize(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=2))
    table = markdown(summary, meta)
    (out / "compare.md").write_text(table)
    print(table)
    return 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
