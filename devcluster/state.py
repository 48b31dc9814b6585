"""Where the dev cluster keeps its state and how it is configured: paths, ports and settings read
from the environment once, shared by every module that starts or talks to the cluster.

State lives in ``<repo>/.devcluster/`` (``DPJOB_DEVCLUSTER_DIR``): ``kubeconfig``, ``bin/`` (kubectl,
helm), ``logs/``, ``run/`` (pki, etcd data, kwok config) and ``pids/``. Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

from devcluster import realnode

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("DPJOB_DEVCLUSTER_DIR", REPO / ".devcluster"))
RUN, LOGS, PIDS, BIN = STATE / "run", STATE / "logs", STATE / "pids", STATE / "bin"
KUBECONFIG = STATE / "kubeconfig"

ETCD_CLIENT_PORT = int(os.environ.get("DPJOB_ETCD_PORT", "23790"))
ETCD_PEER_PORT = ETCD_CLIENT_PORT + 10
APISERVER_PORT = int(os.environ.get("DPJOB_APISERVER_PORT", "16443"))
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = os.environ.get("DPJOB_POD_CIDR", "10.244.0.0/16")  # 65k pod IPs: room for thousands of pods
# Kubernetes' own gang scheduling (Workload and PodGroup, scheduling.k8s.io/v1alpha2; alpha in 1.35+).
# DPJOB_CLUSTER_GANG_SCHEDULING=0 brings the cluster up without it, like most clusters today (the
# operator's own DPJOB_GANG_SCHEDULING, auto | disabled, is another setting: whether it uses the API).
GANG_SCHEDULING = os.environ.get("DPJOB_CLUSTER_GANG_SCHEDULING", "1") not in ("0", "false", "no")
GANG_FEATURE_GATES = (["--feature-gates=GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"]
                      if GANG_SCHEDULING else [])
# Real nodes (kubelet + containerd): DPJOB_REAL_NODES=0 brings the cluster up with kwok pools only.
# ``cluster.py node add|remove N`` adds or removes one at run time (the multi-node tests do), up to
# MAX_REAL_NODES: each has its own subnet 10.88.<i>.0/24 and kubelet ports 10250 + 10*i.
MAX_REAL_NODES = 4
REAL_NODES = int(os.environ.get("DPJOB_REAL_NODES", "1"))
if not 0 <= REAL_NODES <= MAX_REAL_NODES:
    raise SystemExit(f"DPJOB_REAL_NODES={REAL_NODES}: the dev cluster runs 0 to {MAX_REAL_NODES} real nodes")
ALL_NODES = [realnode.RealNode(i, STATE / f"node-{i}") for i in range(MAX_REAL_NODES)]
NODES = ALL_NODES[:REAL_NODES]  # the nodes ``up`` starts
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def node_components(nodes: list[realnode.RealNode]) -> tuple[str, ...]:
    return tuple(c for n in nodes for c in (f"containerd-{n.index}", f"kubelet-{n.index}"))


NODE_COMPONENTS = node_components(NODES) + (("kube-proxy",) if NODES else ())
# Components started in this order and stopped in reverse.
# The last ones are started on top of the cluster (devcluster/dev.py, devcluster/dev_prometheus.py: make dev,
# the e2e tests) and stopped here first.
# Every node that may run is listed, so ``down`` also stops the nodes added at run time.
COMPONENTS = ("registry", *CONTROL_PLANE, "ascend-device-plugin", *node_components(ALL_NODES), "kube-proxy",
              "operator", "prometheus")
