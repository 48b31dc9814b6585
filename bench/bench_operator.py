"""Operator scale benchmark on the local control plane (kwok nodes).

Measures, side by side in one run:
  1. apply -> all rank pods created and -> all ranks Running, for 64 and 512 ranks, with the
     default parallel creation (concurrency 32) against sequential creation (concurrency 1, the
     way Kubeflow v1 creates pods), reporting the ratio; and the default (gang-scheduled through a
     PodGroup when the cluster serves the API) against gang scheduling disabled, so the price of
     all-or-nothing placement is a number;
  2. last rank Running -> rank table ConfigMap completed, for 8 and 128 NPU pods (issue 4).

Run: `make bench` or `KUBECONFIG=.devcluster/kubeconfig python bench/bench_operator.py [--sizes 64,512]`.
Writes bench/results/operator.json. Numbers depend on the machine: compare ratios, not seconds.
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

from devcluster.kwok_pools import DECLARED_FEATURES  # noqa: E402
from tests.support.cluster import kubectl  # noqa: E402
from tests.support.operator import OperatorProcess  # noqa: E402
from tests.support.paths import DEVCLUSTER, KUBECONFIG  # noqa: E402

BENCH_LABEL = "dpjob.io/bench-node"


def ensure_nodes(core: client.CoreV1Api, pool: str, count: int, extra: dict[str, str]) -> None:
    """Extra kwok nodes so a 512-rank job fits (the default pools hold about 220 CPU pods)."""
    labels = {"type": "kwok", BENCH_LABEL: "true", "dpjob.io/pool": pool}
    if pool == "npu":
        labels.update({"accelerator": "huawei-Ascend910", "accelerator-type": "module-910b-8"})
    taints = [{"key": "huawei.com/Ascend910", "effect": "NoSchedule"}] if pool == "npu" else []
    capacity = {"cpu": "512", "memory": "4Ti", "pods": "1000", **extra}
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"bench-{pool}-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                           "labels": {**labels, "kubernetes.io/hostname": f"bench-{pool}-{i}"}},
              "spec": {"taints": taints},
              "status": {"capacity": capacity, "allocatable": capacity, "declaredFeatures": list(DECLARED_FEATURES)}}
             for i in range(count)]
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))


def job(name: str, replicas: int, accelerator: str = "cpu", devices: int | None = None) -> dict:
    spec: dict = {"replicas": replicas, "accelerator": accelerator,
                  "template": {"spec": {"containers": [{"name": "trainer", "image": "bench",
                                                        "command": ["sleep", "inf"]}]}}}
    if devices is not None:
        spec["devicesPerReplica"] = devices
        spec["template"]["spec"]["nodeSelector"] = {BENCH_LABEL: "true"}
    elif accelerator == "cpu":
        spec["template"]["spec"]["nodeSelector"] = {BENCH_LABEL: "true"}
    return {"apiVersion": "dpjob.io/v1alpha1", "kind": "DataParallelJob", "metadata": {"name": name}, "spec": spec}


def count_pods(core, ns: str, name: str) -> tuple[int, int]:
    pods = core.list_namespaced_pod(ns, label_selector=f"dpjob.io/job-name={name}").items
    return len(pods), sum(1 for p in pods if p.status.phase == "Running")


def wait_created_and_running(core, ns: str, name: str, replicas: int, t0: float,
                             timeout: float = 600) -> tuple[float | None, float | None]:
    """Seconds since ``t0`` until every rank pod of job ``name`` exists, and until every one Runs."""
    created = running = None
    while time.perf_counter() - t0 < timeout:
        n, r = count_pods(core, ns, name)
        now = time.perf_counter() - t0
        if created is None and n >= replicas:
            created = now
        if r >= replicas:
            running = now
            break
        time.sleep(0.1)
    return created, running


def time_job(custom, core, ns: str, name: str, replicas: int, timeout: float = 600) -> dict:
    t0 = time.perf_counter()
    custom.create_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs", job(name, replicas))
    created, running = wait_created_and_running(core, ns, name, replicas, t0, timeout)
    st = custom.get_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs", name).get("status", {})
    delete_job(custom, core, ns, name)
    return {"replicas": replicas, "created_s": created, "running_s": running, "phase": st.get("phase")}


def time_rank_table(custom, core, ns: str, name: str, replicas: int, timeout: float = 300) -> dict:
    custom.create_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs",
                                           job(name, replicas, "npu", devices=1))
    t0 = time.perf_counter()
    all_running = None
    while time.perf_counter() - t0 < timeout:
        if all_running is None and count_pods(core, ns, name)[1] >= replicas:
            all_running = time.perf_counter()
        try:
            data = core.read_namespaced_config_map(f"{name}-ranktable-hccl", ns).data or {}
        except client.ApiException:
            data = {}
        if json.loads(data.get("hccl.json", "{}")).get("status") == "completed":
            done = time.perf_counter()
            delete_job(custom, core, ns, name)  # free the chips for the next size
            return {"pods": replicas, "table_after_last_running_s": round(done - (all_running or done), 3),
                    "apply_to_table_s": round(done - t0, 3)}
        time.sleep(0.05)
    return {"pods": replicas, "table_after_last_running_s": None}


def delete_job(custom, core, ns: str, name: str) -> None:
    custom.delete_namespaced_custom_object("dpjob.io", "v1alpha1", ns, "dataparalleljobs", name)
    deadline = time.perf_counter() + 120
    while count_pods(core, ns, name)[0] and time.perf_counter() < deadline:
        time.sleep(0.2)


def with_operator(env: dict[str, str], fn):
    from devcluster import stack

    stack.scale_operator(0)  # one operator at a time (they share the leader Lease): this one
    op = OperatorProcess(KUBECONFIG, DEVCLUSTER / "logs" / "operator-bench.log", env)
    op.start()
    try:
        return fn()
    finally:
        op.stop()


def _print_results(results: dict, sizes: list[int]) -> None:
    """The scale table with its sequential/parallel and gang/no-gang ratios, then the rank-table times."""
    print(f"{'mode':15s} {'ranks':>6s} {'all created (s)':>16s} {'all Running (s)':>16s}")
    for row in results["scale"]:
        print(f"{row['mode']:15s} {row['replicas']:6d} {row['created_s'] or float('nan'):16.2f} "
              f"{row['running_s'] or float('nan'):16.2f}")
    for n in sizes:
        par = next(r for r in results["scale"] if r["replicas"] == n and r["mode"].startswith("parallel"))
        seq = next(r for r in results["scale"] if r["replicas"] == n and r["mode"].startswith("sequential"))
        if par["created_s"] and seq["created_s"]:
            ratio = seq["created_s"] / par["created_s"]
            print(f"ratio sequential/parallel, {n} ranks, time to all created: {ratio:.2f}x")
        flat = next(r for r in results["scale"] if r["replicas"] == n and r["mode"].startswith("no-gang"))
        if par["running_s"] and flat["running_s"]:
            print(f"ratio gang/no-gang, {n} ranks, time to all Running: {par['running_s'] / flat['running_s']:.2f}x")
    print(f"\n{'NPU pods':>8s} {'last Running -> table completed (s)':>36s} {'apply -> table (s)':>20s}")
    for row in results["ranktable"]:
        print(f"{row['pods']:8d} {row['table_after_last_running_s']!s:>36s} {row.get('apply_to_table_s')!s:>20s}")


def main() -> int:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop our operator
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="64,512")
    parser.add_argument("--table-sizes", default="8,128")
    args = parser.parse_args()
    config.load_kube_config(str(KUBECONFIG))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    from devcluster import stack

    stack.apply_crds()
    ensure_nodes(core, "cpu", 2, {})
    ensure_nodes(core, "npu", 16, {"huawei.com/Ascend910": "8"})
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict = {"scale": [], "ranktable": []}
    for label, env in (("parallel(32)", {"DPJOB_CREATE_CONCURRENCY": "32"}),
                       ("sequential(1)", {"DPJOB_CREATE_CONCURRENCY": "1"}),
                       ("no-gang(32)", {"DPJOB_CREATE_CONCURRENCY": "32", "DPJOB_GANG_SCHEDULING": "disabled"})):
        ns = f"bench-{int(time.time())}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        try:
            rows = with_operator(env, lambda ns=ns: [time_job(custom, core, ns, f"scale{n}", n) for n in sizes])
        finally:
            core.delete_namespace(ns)
        for row in rows:
            row["mode"] = label
            results["scale"].append(row)
    ns = f"bench-rt-{int(time.time())}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        results["ranktable"] = with_operator({}, lambda: [
            time_rank_table(custom, core, ns, f"table{n}", n) for n in (int(s) for s in args.table_sizes.split(","))])
    finally:
        core.delete_namespace(ns)

    _print_results(results, sizes)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "operator.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
