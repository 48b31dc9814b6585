"""What queueing through Kueue costs a DataParallelJob, on the local control plane (kwok nodes).

Side by side in one run, for 64 and 512 ranks: apply -> every rank pod created and -> every rank
Running, for a job labelled with a LocalQueue of a real Kueue v0.17 (the operator makes its
Workload, Kueue admits it, the operator starts the ranks where admitted) against the same job
without the label; the ratio; and the operator's own API requests per job in each mode (its
``rest_client_requests_total``), so the Workload's extra requests are a number.

Run: `make kueue` once, then `KUBECONFIG=.devcluster/kubeconfig python bench/bench_kueue.py
[--sizes 64,512]`. Writes bench/results/kueue.json. Compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402

from bench.bench_operator import delete_job, ensure_nodes, job, wait_created_and_running  # noqa: E402
from bench.measure import OperatorSample  # noqa: E402
from devcluster import kueue as dev_kueue  # noqa: E402
from tests.support import kueue as kq  # noqa: E402
from tests.support.operator import OperatorProcess  # noqa: E402
from tests.support.paths import DEVCLUSTER, KUBECONFIG  # noqa: E402
from tests.support.waits import wait_until  # noqa: E402

QUEUE, CLUSTER_QUEUE = "bench", "dpjob-bench"
FLAVOR_LABELS = {"dpjob.io/bench-node": "true"}


def queue_objects(api: client.ApiClient, ns: str) -> None:
    flavor = {"apiVersion": f"{kq.GROUP}/{kq.VERSION}", "kind": "ResourceFlavor", "metadata": {"name": "bench"},
              "spec": {"nodeLabels": FLAVOR_LABELS}}
    cq = kq.cluster_queue(CLUSTER_QUEUE, "bench", cpu="1000", memory="4Ti", preemption=False)
    for plural, body in (("resourceflavors", flavor), ("clusterqueues", cq)):
        kq.delete_cluster_scoped(api, plural, body["metadata"]["name"])
        kq.create_cluster_scoped(api, plural, body)
    kq.local_queue(api, ns, QUEUE, CLUSTER_QUEUE)
    # Timed from a queue Kueue already serves: a ClusterQueue is Active once its flavors are known.
    wait_until(lambda: kq.condition(kq.objects(api).get_cluster_custom_object(
        kq.GROUP, kq.VERSION, "clusterqueues", CLUSTER_QUEUE), "Active").get("status") == "True",
        timeout=60, what=f"ClusterQueue {CLUSTER_QUEUE} Active")


def bench_job(name: str, replicas: int, queued: bool) -> dict:
    body = job(name, replicas)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    if queued:
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    return body


def time_one(custom, core, sample: OperatorSample, ns: str, name: str, replicas: int, queued: bool,
             timeout: float = 600) -> dict:
    before = sample.read()
    t0 = time.perf_counter()
    custom.create_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs",
                                           bench_job(name, replicas, queued))
    created, running = wait_created_and_running(core, ns, name, replicas, t0, timeout)
    requests = sample.read().minus(before)["api_requests"]
    delete_job(custom, core, ns, name)
    return {"replicas": replicas, "queued": queued, "created_s": created, "running_s": running,
            "operator_requests": requests}


def run(api: client.ApiClient, sizes: list[int]) -> list[dict]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"bench-kueue-{int(time.time())}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    queue_objects(api, ns)
    op = OperatorProcess(KUBECONFIG, DEVCLUSTER / "logs" / "operator-bench.log")
    op.start()
    try:
        sample = OperatorSample(op.proc.pid, f"http://127.0.0.1:{op.metrics_port}/metrics")
        return [time_one(custom, core, sample, ns, f"{'q' if queued else 'p'}{n}", n, queued)
                for n in sizes for queued in (False, True)]
    finally:
        op.stop()
        core.delete_namespace(ns)
        kq.delete_cluster_scoped(api, "clusterqueues", CLUSTER_QUEUE)
        kq.delete_cluster_scoped(api, "resourceflavors", "bench")


def report(rows: list[dict]) -> None:
    print(f"{'ranks':>6s} {'mode':>10s} {'all created (s)':>16s} {'all Running (s)':>16s} {'operator requests':>18s}")
    for row in rows:
        print(f"{row['replicas']:6d} {'Kueue' if row['queued'] else 'no queue':>10s} "
              f"{row['created_s'] or float('nan'):16.2f} {row['running_s'] or float('nan'):16.2f} "
              f"{row['operator_requests']:18.0f}")
    for n in sorted({r["replicas"] for r in rows}):
        plain, queued = (next(r for r in rows if r["replicas"] == n and r["queued"] is q) for q in (False, True))
        if plain["running_s"] and queued["running_s"]:
            ratio = queued["running_s"] / plain["running_s"]
            extra = queued["operator_requests"] - plain["operator_requests"]
            print(f"ratio Kueue/no queue, {n} ranks, time to all Running: {ratio:.2f}x; "
                  f"extra operator requests per job: {extra:.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,512")
    args = parser.parse_args()
    config.load_kube_config(str(KUBECONFIG))
    api = client.ApiClient()
    from devcluster import stack

    stack.apply_crds()
    stack.scale_operator(0)
    dev_kueue.install()
    ensure_nodes(client.CoreV1Api(api), "cpu", 2, {})
    rows = run(api, [int(s) for s in args.sizes.split(",")])
    report(rows)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "kueue.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
