"""What a rank pod's bytes cost the control plane: the same N pods posted by the raw client (32
threads, as compare.py's floor), in different shapes, one after the other on one cluster.

- ``raw``: the floor's pod (one container, a command, a node selector);
- ``dpjob-inline``: a dpjob rank pod with the whole environment contract inline (as before
  2026-11-27: ~28 variables, 1.4 KB);
- ``dpjob``: a dpjob rank pod as the operator builds it now (``build_rank_pod``: the shared part
  of the environment through ``envFrom``, builders/shared_env.py);
- ``dpjob-noenv``: the same with no environment at all (what the environment costs, at most).

dpjob's pods are posted without their owner reference (there is no job: the garbage collector
would delete them) and nothing else runs, so the difference between shapes is the bytes alone.
For each: seconds to all created and all Running (kwok), and the CPU seconds of every
control-plane process. Writes bench/results/pod_shape.json and prints a table.

Run: ``python bench/bench_pod_shape.py --ranks 512 --reps 2`` (part of ``make bench``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from kubernetes import client, config  # noqa: E402

from bench.bench_operator import BENCH_LABEL, ensure_nodes, job  # noqa: E402
from bench.compare import RAW_THREADS  # noqa: E402
from bench.compare import pod as raw_pod  # noqa: E402
from bench.measure import PodClock, RunMeter, delete_namespace  # noqa: E402
from dpjob_operator.api.spec import parse_job  # noqa: E402
from dpjob_operator.builders.env import build_rank_env, merge_env  # noqa: E402
from dpjob_operator.builders.pods import build_rank_pod  # noqa: E402
from dpjob_operator.config import OperatorConfig  # noqa: E402
from tests.support.paths import KUBECONFIG  # noqa: E402

SHAPES = ("raw", "dpjob-inline", "dpjob", "dpjob-noenv")


def dpjob_pod(ns: str, n: int, i: int, shape: str) -> dict[str, Any]:
    body = job("shape", n)
    body["metadata"].update(namespace=ns, uid="00000000-0000-0000-0000-000000000001")
    body["spec"]["runPolicy"] = {"gangScheduling": "Disabled"}
    parsed, pool = parse_job(body), OperatorConfig().pools["cpu"]
    pod = build_rank_pod(parsed, i, 0, pool)
    pod["metadata"].pop("ownerReferences")
    trainer = pod["spec"]["containers"][0]
    if shape == "dpjob-inline":
        trainer.pop("envFrom")
        trainer["env"] = merge_env([], build_rank_env(parsed, i, 0, pool))
    elif shape == "dpjob-noenv":
        trainer.pop("envFrom")
        trainer.pop("env")
    return pod


def builder(shape: str, n: int) -> Callable[[str, int], dict[str, Any]]:
    if shape == "raw":
        return raw_pod
    return lambda ns, i: dpjob_pod(ns, n, i, shape)


def run_shape(core: client.CoreV1Api, meter: RunMeter, shape: str, n: int, timeout: float) -> dict[str, Any]:
    ns = f"shape-{shape}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        bodies = [builder(shape, n)(ns, i) for i in range(n)]
        end = meter.begin(shape)
        clock = PodClock(core, ns, n)
        clock.start()
        with ThreadPoolExecutor(RAW_THREADS) as pool:
            list(pool.map(lambda b: core.create_namespaced_pod(ns, b, _preload_content=False).data, bodies))
        created, running = clock.wait(timeout)
        row = end()
        return {"shape": shape, "pod_bytes": len(json.dumps(bodies[-1], separators=(",", ":"))),
                "created_s": created, "running_s": running,
                **{k: v for k, v in row.items() if k.startswith("cpu_")}}
    finally:
        delete_namespace(core, ns)


def table(rows: list[dict[str, Any]]) -> str:
    cpu = sorted({k for r in rows for k in r if k.startswith("cpu_")})
    lines = ["| shape | pod bytes | all created s | all Running s | " + " | ".join(
        k[4:-2] + " CPU s" for k in cpu) + " |", "|---" * (4 + len(cpu)) + "|"]
    for shape in SHAPES:
        mine = [r for r in rows if r["shape"] == shape]
        if not mine:
            continue

        def med(key: str, runs: list[dict[str, Any]] = mine) -> str:
            values = [r[key] for r in runs if r.get(key) is not None]
            return f"{statistics.median(values):.2f}" if values else "-"
        lines.append(f"| {shape} | {mine[0]['pod_bytes']} | {med('created_s')} | {med('running_s')} | "
                     + " | ".join(med(k) for k in cpu) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args(argv)
    config.load_kube_config(str(KUBECONFIG))
    settings = client.Configuration.get_default_copy()
    settings.connection_pool_maxsize = 64
    client.Configuration.set_default(settings)
    core = client.CoreV1Api()
    from devcluster import cluster
    from tests.support.cluster import kubectl

    ensure_nodes(core, "cpu", max(2, -(-args.ranks // 900)), {})
    meter = RunMeter(core, {}, {name: cluster.read_pid(name) for name in cluster.CONTROL_PLANE})
    rows = []
    try:
        for rep in range(args.reps):
            for shape in SHAPES[rep % len(SHAPES):] + SHAPES[:rep % len(SHAPES)]:  # rotated, as compare.py
                rows.append({**run_shape(core, meter, shape, args.ranks, args.timeout), "rep": rep})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        kubectl("delete", "nodes", "-l", f"{BENCH_LABEL}=true", "--wait=false")  # leave the pools as found
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pod_shape.json").write_text(json.dumps({"ranks": args.ranks, "runs": rows}, indent=2))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
