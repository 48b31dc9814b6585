"""The same work through the raw API client, dpjob and Kubeflow's training-operator, side by side.

One run, one cluster (the dev cluster's control plane and kwok nodes), alternating the order of
the engines in every repetition so that none always runs on a warmer or busier cluster:

- **raw**: N pods created directly by 32 client threads: the floor any operator pays on top of;
- **dpjob**: a DataParallelJob of N ranks, gang scheduling on (a PodGroup) and off;
- **kubeflow**: a PyTorchJob (1 Master + N-1 Workers) on the real training-operator v1.8.1 at its
  defaults (1 worker thread, QPS 20, burst 30; bench/kubeflow.py).

Scenarios: one job of N ranks for each ``--sizes``; ``--jobs`` jobs of 2 to 8 ranks applied at
once (bench/many_jobs.py: also each operator's reconcile time p50/p99); a gang restart at each
``--restart-sizes`` (bench/gang_restart.py); ``--rss-jobs`` jobs once through raw and dpjob for
the operator's memory; and the CPU of an idle pass over a 4,096 x 8 job (bench/bench_idle_pass.py).

For each: seconds from apply to all N pods created and to all N Running (kwok), the API server's
own request count (every client), and, for the two operators, CPU seconds and RSS (now and peak)
of the operator process (/proc) and the API requests it made (its own
``rest_client_requests_total``). Medians and spread (min-max) over the repetitions; ratios
dpjob / raw and Kubeflow / dpjob. Writes bench/results/compare.json and compare.md.

Run: ``make bench-compare`` or ``python bench/compare.py --sizes 64,512 --reps 3``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from kubernetes import client, config  # noqa: E402

from bench.bench_operator import BENCH_LABEL, ensure_nodes, job  # noqa: E402
from bench.gang_restart import run_restart  # noqa: E402
from bench.kubeflow import TrainingOperator  # noqa: E402
from bench.many_jobs import run_many  # noqa: E402
from bench.measure import OperatorSample, PodClock, RunMeter, delete_namespace  # noqa: E402
from bench.report import ENGINES, markdown, summarize  # noqa: E402
from dpjob_operator.builders.ranktable import max_servers  # noqa: E402
from tests.support.cluster import kubectl  # noqa: E402
from tests.support.operator import OperatorProcess  # noqa: E402
from tests.support.paths import DEVCLUSTER, KUBECONFIG  # noqa: E402

RAW_THREADS = 32


def pod(ns: str, i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"raw-{i}", "namespace": ns},
            "spec": {"nodeSelector": {BENCH_LABEL: "true"},
                     "containers": [{"name": "trainer", "image": "bench", "command": ["sleep", "inf"]}]}}


def submit_raw(core: client.CoreV1Api, ns: str, n: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(RAW_THREADS) as pool:
        # .data: read to the end, or urllib3 does not reuse the connection (a TLS handshake per pod)
        list(pool.map(lambda i: core.create_namespaced_pod(ns, pod(ns, i), _preload_content=False).data, range(n)))


# The CRD's own size rule (builders/ranktable/size.py): above it a generic table is refused at apply.
NO_TABLE_ABOVE = max_servers(1, hccl=False)


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
        if n > NO_TABLE_ABOVE:  # the CRD refuses a generic table over 1 MiB
            body["spec"]["rankTable"] = {"format": "none"}
        custom.create_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs", body)
    return dpjob


def run_once(engine: str, n: int, core: client.CoreV1Api, custom: client.CustomObjectsApi, meter: RunMeter,
             timeout: float) -> dict[str, Any]:
    ns = _namespace(core, f"cmp-{engine}-{n}")
    try:
        end = meter.begin(engine)
        clock = PodClock(core, ns, n)
        clock.start()
        submitter(engine, core, custom)(ns, n)
        created, running = clock.wait(timeout)
        return {"scenario": f"1 job x {n}", "engine": engine, "ranks": n, "created_s": created, "running_s": running,
                **end()}
    finally:
        delete_namespace(core, ns)


def _namespace(core: client.CoreV1Api, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    return ns


def _rotations(engines: list[str], reps: int) -> list[tuple[int, list[str]]]:
    """Each repetition's engine order, rotated so that none always runs first (on the coolest cluster)."""
    return [(rep, engines[rep % len(engines):] + engines[:rep % len(engines)]) for rep in range(reps)]


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64,512", help="ranks per job, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--jobs", type=int, default=200, help="jobs of 2-8 ranks applied at once (0: skip)")
    parser.add_argument("--restart-sizes", default="512", help="gang restart at these sizes ('': skip)")
    parser.add_argument("--rss-jobs", type=int, default=0,
                        help="this many jobs of 2-8 ranks through raw and dpjob once, for the operator's memory")
    parser.add_argument("--dpjob-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of the dpjob operator (e.g. DPJOB_API_QPS=100 to compare a client cap)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run before it counts as missing")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    return parser.parse_args(argv)


def _scenarios(args: argparse.Namespace, engines: list[str], core: client.CoreV1Api,
               custom: client.CustomObjectsApi, meter: RunMeter) -> list[dict[str, Any]]:
    """Every run, printed as it finishes (a long benchmark shows progress)."""
    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any], rep: int) -> None:
        row["rep"] = rep
        print(json.dumps(row), flush=True)
        rows.append(row)

    def many(engine: str, jobs: int, rep: int) -> None:
        row = run_many(engine, jobs, core, custom, meter, args.timeout, pytorchjob, pod,
                       _namespace(core, f"many-{engine}"))
        record({**row, "scenario": f"{jobs} jobs x 2-8"}, rep)

    for n in (int(s) for s in args.sizes.split(",") if s):
        for rep, order in _rotations(engines, args.reps):
            for engine in order:
                record(run_once(engine, n, core, custom, meter, args.timeout), rep)
    for rep, order in _rotations(engines, args.reps if args.jobs else 0):
        for engine in order:
            many(engine, args.jobs, rep)
    restartable = [e for e in engines if e != "kubeflow"]  # v1 has no gang restart (bench/gang_restart.py)
    for n in (int(s) for s in args.restart_sizes.split(",") if s):
        for rep, order in _rotations(restartable, args.reps):
            for engine in order:
                ns = _namespace(core, f"restart-{engine}-{n}")
                try:
                    record(run_restart(engine, n, core, submitter(engine, core, custom), meter, args.timeout,
                                       ns, pod), rep)
                finally:
                    delete_namespace(core, ns)
    for engine in ([e for e in engines if e in ("raw", "dpjob")] if args.rss_jobs else []):
        many(engine, args.rss_jobs, 0)
    return rows


def _notes(args: argparse.Namespace) -> list[str]:
    notes = []
    if any(int(n) > NO_TABLE_ABOVE for n in f"{args.sizes},{args.restart_sizes}".split(",") if n):
        notes.append(f"over {NO_TABLE_ABOVE:,} ranks dpjob runs with rankTable.format none: its CRD refuses a generic "
                     "rank table that would not fit in a ConfigMap (1 MiB), and Kubeflow writes none either.")
    if args.restart_sizes:
        notes.append("gang restart: from rank 0 made to fail (kwok, exit 137) to a whole new gang Running. The raw "
                     "floor replaces the pods itself (one delete-collection, N creates under new names). Kubeflow's "
                     "PyTorchJob v1 recreates only the failed pod: not comparable, not run.")
    if args.rss_jobs:
        notes.append(f"{args.rss_jobs} jobs: one run, raw and dpjob only (the operator's memory with that many jobs).")
    notes.append("API server requests: the API server's apiserver_request_total during the run, every client "
                 "(operator, kube-scheduler, kwok, the benchmark's own watch and submissions).")
    return notes


def _idle_pass() -> str:
    """The pure part of an idle pass over a 4,096 x 8 Running job (bench/bench_idle_pass.py)."""
    sys.path.insert(0, str(REPO / "operator"))
    from bench.bench_idle_pass import scenario

    row = scenario("4096 x 8, no rank table", "gpu", 4096, 8, "none")
    return (f"idle pass (a 4,096 x 8 Running job, nothing changed; bench/bench_idle_pass.py): "
            f"{row['idle_ms_median']:.2f} ms CPU (first pass {row['cold_ms']:.0f} ms).")


def main(argv: list[str] | None = None) -> int:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the operators
    args = _arguments(argv)
    engines = [e for e in args.engines.split(",") if e]
    sizes = [int(s) for s in f"{args.sizes},{args.restart_sizes}".split(",") if s]
    config.load_kube_config(str(KUBECONFIG))
    submitting = client.Configuration.get_default_copy()
    submitting.connection_pool_maxsize = 64  # one kept connection per submitting thread (the default is 5 per core)
    client.Configuration.set_default(submitting)
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    from devcluster import cluster, stack

    stack.apply_crds()
    ensure_nodes(core, "cpu", max(2, -(-max([*sizes, args.jobs * 5, args.rss_jobs * 5]) // 900)), {})  # 2-8 ranks a job
    chart_replicas = stack.operator_replicas()
    stack.scale_operator(0)  # the chart's operator would share the work (and the Lease) with ours
    logs = DEVCLUSTER / "logs"
    from dpjob_operator.config import OperatorConfig

    # The operator as shipped (the test harness's 5 s resync would make 1,000 jobs cost 200 passes a
    # second: that is the tests' choice, not the product's); --dpjob-env overrides any of it.
    dpjob_env = {"DPJOB_RESYNC_SECONDS": str(OperatorConfig().resync_seconds),
                 **dict(kv.split("=", 1) for kv in args.dpjob_env)}
    ours = OperatorProcess(KUBECONFIG, logs / "operator-compare.log", dpjob_env)
    peer = TrainingOperator(kubectl, KUBECONFIG, logs / "training-operator-compare.log") \
        if "kubeflow" in engines else None
    try:
        ours.start()
        operators = {"dpjob": OperatorSample(ours.proc.pid, f"http://127.0.0.1:{ours.metrics_port}/metrics")}
        if peer:
            peer.start()
            operators["kubeflow"] = OperatorSample(peer.proc.pid, peer.metrics_url)
        control_plane = {name: cluster.read_pid(name) for name in cluster.CONTROL_PLANE}
        rows = _scenarios(args, engines, core, custom, RunMeter(core, operators, control_plane))
        _write(args, rows, _meta(args, dpjob_env, peer))  # before giving the cluster back: nothing lost
    finally:
        ours.stop()
        if peer:
            peer.stop()
        kubectl("delete", "nodes", "-l", f"{BENCH_LABEL}=true", "--wait=false")  # ours: leave the pools as found
        stack.give_back_operator(chart_replicas)  # the chart's operator takes the cluster back
    return 0


def _meta(args: argparse.Namespace, dpjob_env: dict[str, str], peer: TrainingOperator | None) -> dict[str, Any]:
    import platform

    from dpjob_operator.config import load_config

    cfg = load_config(environ=dpjob_env)
    return {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {_cores()} cores, "
            f"{platform.system()} {platform.release()}", "reps": args.reps,
            "kubeflow": {"version": "v1.8.1", **(peer.settings if peer else {})},
            "dpjob": {"qps": cfg.api_qps if cfg.api_qps > 0 else "none (APF)", "create_concurrency":
                      cfg.create_concurrency, "workers": cfg.workers, "resync_s": cfg.resync_seconds},
            "notes": [*_notes(args), _idle_pass()]}


def _write(args: argparse.Namespace, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    summary = summarize(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=2))
    table = markdown(summary, meta)
    (out / "compare.md").write_text(table)
    print(table)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
