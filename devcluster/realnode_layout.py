"""A real node's layout: which kubelet, containerd, ports, directories and pod subnet each real node
of the local cluster has, and what every real node shares (its pool, taint, cluster DNS). Pure:
devcluster/realnode.py says why each setting is what it is. Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("DPJOB_CACHE", Path.home() / ".cache" / "dpjob"))
POOL = "real"
TAINT = {"key": "dpjob.io/real-node", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
POD_SUBNET = "10.88.0.0/16"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
CONTAINERD, CTR, KUBE_PROXY_CMD = "/usr/bin/containerd", "/usr/bin/ctr", "kube-proxy"


@dataclass(frozen=True)
class RealNode:
    """One kubelet with its own containerd, ports, directories and pod subnet."""

    index: int
    state: Path  # .devcluster/node-<index>

    @property
    def name(self) -> str:
        return f"real-{self.index}"

    @property
    def subnet(self) -> str:
        return f"10.88.{self.index}.0/24"

    @property
    def kubelet_port(self) -> int:
        return 10250 + 10 * self.index

    @property
    def socket(self) -> Path:
        return self.state / "containerd" / "containerd.sock"

    @property
    def registry_hosts(self) -> Path:
        return self.state / "containerd" / "certs.d"

    @property
    def bridge(self) -> str:
        return f"dpjob-cni{self.index}"

    @property
    def cgroup_root(self) -> str:
        return f"/dpjob-{self.name}"

    @property
    def pod_logs_dir(self) -> Path:
        """The kubelet's pod log directory (``podLogsDir``). Its own per node: a kubelet's container
        GC removes every directory there whose pod it does not run, so two kubelets on the default
        ``/var/log/pods`` delete each other's logs each minute (``kubectl logs`` then starts at
        whatever the container wrote after the kubelet reopened the file)."""
        return self.state / "pod-logs"

    @property
    def containerd_root(self) -> Path:
        return CACHE / "containerd" / self.name


def labels(node: RealNode) -> dict[str, str]:
    return {"dpjob.io/pool": POOL, "dpjob.io/real-node": "true", "kubernetes.io/hostname": node.name}
