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
REAL_NODES = int(os.environ.get("DPJOB_REAL_NODES", "1"))
NODES = [realnode.RealNode(i, STATE / f"node-{i}") for i in range(REAL_NODES)]
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
NODE_COMPONENTS = tuple(c for n in NODES for c in (f"containerd-{n.index}", f"kubelet-{n.index}")) + \
    (("kube-proxy",) if NODES else ())
# Components started in this order and stopped in reverse.
# The last ones are started on top of the cluster (devcluster/dev.py, devcluster/dev_prometheus.py: make dev,
# the e2e tests) and stopped here first.
COMPONENTS = ("registry", *CONTROL_PLANE, "ascend-device-plugin", *NODE_COMPONENTS, "operator", "prometheus")
