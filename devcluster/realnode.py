"""A real node for the local cluster: kubelet + containerd + runc + CNI, kube-proxy and CoreDNS.

Why: rank pods must run as real containers from images built here (devcluster/images.sh) and
pulled from the dev cluster's registry (devcluster/registry.py), with cluster DNS, ``kubectl
logs``/``exec``/``port-forward`` and the operator as a Helm-installed pod, exactly as on a user's
cluster. kwok pools stay for scale tests and GPU/NPU simulation.

Every part comes from Debian (containerd, runc, CNI plugins, iptables, conntrack) or is built from
Go modules (kubelet, kube-proxy, CoreDNS: devcluster/build.sh). The settings that this machine
kind needs, each learnt from a failed pod (shared/reference/real-node.md):

* containerd's CRI ``restrict_oom_score_adj``: root here lacks CAP_SYS_RESOURCE, and runc fails to
  lower the sandbox's oom_score_adj without it;
* runc, not crun (crun refuses the hybrid cgroup layout); kubelet ``failCgroupV1: false`` and
  ``cgroupDriver: cgroupfs`` on cgroup v1;
* the pause image is built here and pulled from the dev registry (containerd's ``sandbox_image``);
  every image reaches containerd through the CRI's pull, configured by ``hosts.toml`` files
  (``certs.d``): the dev registry over plain HTTP, and ``ghcr.io`` mirrored to it;
* the kubelet serves a certificate from the cluster CA and trusts the API server's client
  certificate, so ``kubectl logs`` works; ``clusterDNS`` points at CoreDNS behind a ClusterIP.

containerd keeps its content store under ~/.cache/dpjob/containerd so a multi-GB trainer image is
pulled once per machine, not once per cluster; a tag that moved in the registry since (``:cpu``
after a trainer change) is forgotten on the node (``forget``), so the next pod pulls it
again, as ``imagePullPolicy: Always`` would. Standard library only: this runs before the
project's virtual environment exists.

This module is the one name the cluster, the tests and the benchmarks use for a real node; each
part lives in the module for its concern and is re-exported here: ``realnode_layout`` (a node's
ports, directories and subnet; the pool, taint and DNS they share), ``realnode_config`` (the
containerd, CNI, kubelet and kube-proxy configurations), ``coredns`` (cluster DNS),
``realnode_images`` (what containerd holds, and forgetting moved tags) and ``realnode_cleanup``
(stopping containers, unmounting, removing the bridge and cgroups).
"""

from __future__ import annotations

from devcluster.coredns import coredns_manifests
from devcluster.realnode_cleanup import (
    ensure_cgroup_root,
    kill_containers,
    remove_cgroups,
    remove_network,
    unmount_under,
    wipe,
)
from devcluster.realnode_config import cni_config, containerd_config, kube_proxy_config, kubelet_config
from devcluster.realnode_images import ctr, forget, image_digests, moved_tags, superseded
from devcluster.realnode_layout import (
    CACHE,
    CLUSTER_DOMAIN,
    CONTAINERD,
    CTR,
    DNS_SERVICE_IP,
    KUBE_PROXY_CMD,
    POD_SUBNET,
    POOL,
    TAINT,
    TOLERATION,
    RealNode,
    labels,
)

__all__ = ["CACHE", "CLUSTER_DOMAIN", "CONTAINERD", "CTR", "DNS_SERVICE_IP", "KUBE_PROXY_CMD", "POD_SUBNET", "POOL",
           "TAINT", "TOLERATION", "RealNode", "cni_config", "containerd_config", "coredns_manifests", "ctr",
           "ensure_cgroup_root", "forget", "image_digests", "kill_containers", "kube_proxy_config", "kubelet_config",
           "labels", "moved_tags", "remove_cgroups", "remove_network", "superseded", "unmount_under", "wipe"]
