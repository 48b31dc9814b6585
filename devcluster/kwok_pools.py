"""The simulated node pools: kwok, the GPU/NPU/CPU Nodes it manages (design section 5), its stages
(kwok's own plus ours, which make a Running pod finish or fail on demand, driven by annotations;
docs/devcluster.md) and the simulated Ascend device plugin. Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcluster import manifests
from devcluster.kube import kubectl
from devcluster.processes import alive, read_pid, start, wait_for
from devcluster.state import KUBECONFIG, POD_CIDR, REPO, RUN


@dataclass(frozen=True)
class PoolSpec:
    """A simulated node pool: how many kwok nodes and what they look like."""

    name: str
    count: int
    labels: dict[str, str]
    taints: list[dict[str, str]]
    extended: dict[str, str]


def default_pools() -> list[PoolSpec]:
    """The node pools of design section 5; counts come from DPJOB_{GPU,NPU,CPU}_NODES."""
    gpu_count = int(os.environ.get("DPJOB_GPU_NODES", "4"))
    npu_count = int(os.environ.get("DPJOB_NPU_NODES", "4"))
    cpu_count = int(os.environ.get("DPJOB_CPU_NODES", "2"))
    return [
        PoolSpec(
            "gpu", gpu_count,
            {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
             "nvidia.com/gpu.count": "8", "dpjob.io/pool": "gpu"},
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            {"nvidia.com/gpu": "8"},
        ),
        PoolSpec(
            "npu", npu_count,
            {"accelerator": "huawei-Ascend910", "accelerator-type": "module-910b-8",
             "host-arch": "huawei-x86", "dpjob.io/pool": "npu"},
            [{"key": "huawei.com/Ascend910", "effect": "NoSchedule"}],
            {"huawei.com/Ascend910": "8"},
        ),
        PoolSpec("cpu", cpu_count, {"dpjob.io/pool": "cpu"}, [], {}),
    ]


# What a 1.36 kubelet with its default gates declares and the scheduler matches pods against
# (NodeDeclaredFeatures): a rank pod that restarts in place needs RestartAllContainersOnContainerExits.
DECLARED_FEATURES = ("RestartAllContainersOnContainerExits",)


def node_manifest(pool: PoolSpec, index: int) -> dict[str, Any]:
    """One kwok-managed Node with realistic capacity (status is kept on create for Nodes)."""
    name = f"{pool.name}-node-{index}"
    capacity = {"cpu": "96", "memory": "1536Gi", "pods": "110", "ephemeral-storage": "2Ti", **pool.extended}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", **pool.labels},
        },
        "spec": {"taints": pool.taints},
        "status": {"capacity": capacity, "allocatable": capacity, "declaredFeatures": list(DECLARED_FEATURES)},
    }


# kwok's own stages, from the kwok release devcluster/build.sh unpacks beside the binaries.
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
)


def write_kwok_config(stage_dir: Path) -> Path:
    """kwok's configuration and every stage in one multi-document file, ``run/kwok.yaml``."""
    docs = [manifests.text("kwok-config.yaml")]
    for rel in KWOK_STAGE_FILES:
        docs.append((stage_dir / rel).read_text())
    # Our own stages: make a Running pod finish on demand, driven by annotations (docs/devcluster.md).
    docs.append(manifests.text("kwok-sim-stages.yaml"))
    path = RUN / "kwok.yaml"
    path.write_text("\n---\n".join(d.strip() for d in docs) + "\n")
    return path


def start_kwok(bin_dir: Path) -> None:
    stage_dir = bin_dir.parent / "kwok-stage"
    kwok_cfg = write_kwok_config(stage_dir)
    start("kwok", [str(bin_dir / "kwok"), f"--kubeconfig={KUBECONFIG}", f"--config={kwok_cfg}",
                   "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                   "--node-ip=172.30.0.1", f"--cidr={POD_CIDR}", "--node-lease-duration-seconds=40",
                   "--server-address=127.0.0.1:0"])


def create_nodes() -> int:
    """Create every pool's Nodes and wait until kwok reports them Ready; returns how many."""
    nodes = [node_manifest(pool, i) for pool in default_pools() for i in range(pool.count)]
    wait_for("nodes to be created", lambda: kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": nodes})).returncode == 0, 30)
    wait_for("the default service account", lambda: kubectl(
        "get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0, 60,
        "kube-controller-manager")
    wait_for("kwok nodes Ready", lambda: all_nodes_ready(len(nodes)), 60, "kwok")
    return len(nodes)


def all_nodes_ready(expected: int) -> bool:
    out = kubectl("get", "nodes", "-l", "type=kwok", "-o", "json", check=False)
    if out.returncode != 0:
        return False
    items = json.loads(out.stdout)["items"]
    ready = [n for n in items for c in n.get("status", {}).get("conditions", [])
             if c["type"] == "Ready" and c["status"] == "True"]
    return len(ready) >= expected


def ensure_device_plugin(python: str | None) -> None:
    """The simulated Ascend device plugin needs the project's venv (kubernetes client)."""
    script = REPO / "devcluster" / "ascend_device_plugin.py"
    if not python or not script.exists() or alive(read_pid("ascend-device-plugin")):
        return
    start("ascend-device-plugin", [python, str(script), "--kubeconfig", str(KUBECONFIG)],
          env={"PYTHONUNBUFFERED": "1"})
