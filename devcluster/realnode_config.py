"""The configuration files of a real node's containerd, CNI bridge, kubelet and kube-proxy, built
from its layout (devcluster/realnode_layout.py). Pure; devcluster/real_nodes.py writes them.
devcluster/realnode.py says why each setting is what it is. Standard library only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from devcluster.realnode_layout import CLUSTER_DOMAIN, DNS_SERVICE_IP, POD_SUBNET, TAINT, RealNode


def containerd_config(node: RealNode, pause_image: str) -> str:
    return f"""version = 2
root = "{node.containerd_root}"
state = "{node.state / 'containerd' / 'state'}"
[grpc]
  address = "{node.socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{node.containerd_root / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{node.state / 'cni'}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{node.registry_hosts}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"""


def cni_config(node: RealNode) -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": f"dpjob-{node.name}",
        "plugins": [
            {"type": "bridge", "bridge": node.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": node.subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(node.state / "cni-ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(node: RealNode, pki: Path) -> str:
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "failSwapOn": False,
        "enforceNodeAllocatable": [],
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": False,
        "port": node.kubelet_port,
        "healthzPort": node.kubelet_port + 1,
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "registerWithTaints": [TAINT],
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        # The API server's kubelet client certificate (system:masters) is the only caller.
        "authorization": {"mode": "AlwaysAllow"},
        "tlsCertFile": str(node.state / "pki" / "kubelet.crt"),
        "tlsPrivateKeyFile": str(node.state / "pki" / "kubelet.key"),
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "nodeStatusReportFrequency": "10s",
        # A changed ConfigMap or Secret volume reaches its pods on the kubelet's periodic pod sync: 10 s
        # here instead of the default minute, so the dev cluster's config changes (a Prometheus scrape
        # config, a rewritten rank table) show in seconds, at a little kubelet CPU on a few pods.
        "syncFrequency": "10s",
        "containerLogMaxSize": "20Mi",
        "podLogsDir": os.path.normpath(node.pod_logs_dir.absolute()),
        "podPidsLimit": 4096,
        "maxPods": 60,
    }
    return json.dumps(cfg, indent=2)


def kube_proxy_config(node: RealNode, kubeconfig: Path) -> str:
    return json.dumps({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "hostnameOverride": node.name,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # This VM may not raise nf_conntrack_max; leave the kernel's values alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }, indent=2)
