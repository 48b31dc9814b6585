"""Several real nodes: a job's step time with both ranks on one node against one rank per node, and
what one more real node costs in memory.

For each of ``--reps`` repetitions, two 2-rank jobs of the trainer image run in turn (``--task mlp``,
``--steps`` steps, no pacing): ``one-node`` with both ranks on ``real-0``, ``two-nodes`` with one rank
on each of ``real-0`` and ``real-1`` (the pod network between the nodes' bridges). The time per step
is each job's ``train_seconds / steps_this_run`` from the trainer's own report, the slower rank's;
the ratio two-nodes/one-node is what crossing nodes costs (on one host: the routing between two
bridges instead of one bridge, nothing of a real wire).

The memory of the extra node is the resident set of its kubelet and its containerd, and of the
containerd shims of its pods (one per pod), read from /proc while the two-nodes job runs.

Adds ``real-1`` when the cluster has no second node and removes it afterwards. Runs the operator
of this checkout as a process (the Helm-installed one scaled to zero meanwhile).

    python bench/bench_nodes.py --reps 3      # results: bench/results/nodes.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from kubernetes import client, config  # noqa: E402

from devcluster import node_changes, stack  # noqa: E402
from devcluster.processes import read_pid  # noqa: E402
from tests.support import cluster as dpj  # noqa: E402
from tests.support.operator import OperatorProcess  # noqa: E402
from tests.support.paths import DEVCLUSTER, KUBECONFIG  # noqa: E402
from tests.support.realnode_jobs import reports, trainer_job, workdir  # noqa: E402
from tests.support.waits import wait_until  # noqa: E402

RESULTS = REPO / "bench" / "results"
LAYOUTS = {"one-node": ("real-0", "real-0"), "two-nodes": ("real-0", "real-1")}


def rss_mib(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def shim_pids(node_index: int) -> list[int]:
    """The containerd shims of a node's pods, found by that node's state directory on their command line."""
    marker = f"node-{node_index}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmd and marker in cmd:
                pids.append(int(proc.name))
    return pids


def node_memory(index: int) -> dict[str, float]:
    shims = shim_pids(index)
    return {"kubelet_mib": round(rss_mib(read_pid(f"kubelet-{index}")), 1),
            "containerd_mib": round(rss_mib(read_pid(f"containerd-{index}")), 1),
            "shims": len(shims),
            "shim_mib_each": round(statistics.mean(rss_mib(p) for p in shims), 1) if shims else 0.0}


def run_layout(api: client.ApiClient, ns: str, layout: str, steps: int, rep: int) -> dict[str, Any]:
    name = f"{layout}-{rep}"
    job = trainer_job(name, ["--task", "mlp", "--steps", str(steps), "--report", f"{workdir(ns, name)}/report",
                             "--metrics-port", "0"])
    template = job["spec"]["template"]["spec"]
    template["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                               "values": sorted(set(LAYOUTS[layout]))}]}]}}}
    if layout == "two-nodes":
        template["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"dpjob.io/job-name": name}}}]
    dpj.create(api, ns, job)
    dpj.wait_phase(api, ns, name, "Running", timeout=240)
    memory = node_memory(1) if layout == "two-nodes" else {}
    dpj.wait_phase(api, ns, name, "Succeeded", timeout=600)
    per_step = max(r["train_seconds"] / max(1, r["steps_this_run"]) for r in reports(ns, name))
    dpj.delete(api, ns, name)
    return {"layout": layout, "rep": rep, "step_ms": round(per_step * 1000, 3), **memory}


def markdown(rows: list[dict[str, Any]]) -> str:
    med = {layout: statistics.median(r["step_ms"] for r in rows if r["layout"] == layout) for layout in LAYOUTS}
    mem = [r for r in rows if r["layout"] == "two-nodes" and r.get("kubelet_mib")]
    lines = ["| ranks on | step time median ms | vs one node |", "|---|---|---|"]
    for layout in LAYOUTS:
        lines.append(f"| {layout} | {med[layout]:.2f} | {med[layout] / med['one-node']:.2f}x |")
    if mem:
        m = mem[-1]
        lines += ["", "| extra node | kubelet MiB | containerd MiB | shim MiB per pod |", "|---|---|---|---|",
                  f"| real-1 | {m['kubelet_mib']} | {m['containerd_mib']} | {m['shim_mib_each']} |"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    config.load_kube_config(str(KUBECONFIG))
    api = client.ApiClient()
    added = "real-1" not in {n.name for n in node_changes.running_nodes()}
    if added:
        node_changes.add_node(1)
    stack.scale_operator(0)
    op = OperatorProcess(KUBECONFIG, DEVCLUSTER / "logs" / "operator-bench-nodes.log", leader_election=False)
    op.start()
    ns = f"bench-nodes-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    rows = []
    try:
        for rep in range(args.reps):
            for layout in LAYOUTS:
                rows.append(run_layout(api, ns, layout, args.steps, rep))
                print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        client.CoreV1Api(api).delete_namespace(ns)
        op.stop()
        if added:
            wait_until(lambda: not client.CoreV1Api(api).list_namespaced_pod(ns).items, 120, 1,
                       what="the benchmark's pods gone")
            node_changes.remove_node(1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "nodes.json").write_text(json.dumps({"rows": rows, "at": time.time(), "cpus": os.cpu_count()}, indent=2))
    (RESULTS / "nodes.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
