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
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
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
    def containerd_root(self) -> Path:
        return CACHE / "containerd" / self.name


def labels(node: RealNode) -> dict[str, str]:
    return {"dpjob.io/pool": POOL, "dpjob.io/real-node": "true", "kubernetes.io/hostname": node.name}


# ------------------------------------------------------------------------------------- configs


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
            {"type": "bridge", "bridge": node.bridge, "isGateway": True, "ipMasq": True, "hairpinMode": True,
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
        "containerLogMaxSize": "20Mi",
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


def coredns_manifests(image: str, node_selector: dict[str, str]) -> list[dict]:
    """CoreDNS as kubeadm deploys it, non-root on port 1053 behind the kube-dns ClusterIP."""
    corefile = f""".:1053 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . /etc/resolv.conf
    cache 5
}}
"""
    labels_ = {"k8s-app": "kube-dns"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels_},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels_},
                  "template": {"metadata": {"labels": labels_}, "spec": {
                      "serviceAccountName": "coredns", "dnsPolicy": "Default", "priorityClassName":
                      "system-cluster-critical", "nodeSelector": node_selector, "tolerations": [TOLERATION],
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "runAsGroup": 65535,
                                          "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [{
                          "name": "coredns", "image": image, "imagePullPolicy": "IfNotPresent",
                          "args": ["-conf", "/etc/coredns/Corefile"],
                          "ports": [{"name": "dns", "containerPort": 1053, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 1053, "protocol": "TCP"},
                                    {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
                          "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "170Mi"}},
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                          "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10,
                                            "failureThreshold": 5},
                          "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                              "capabilities": {"drop": ["ALL"]}},
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}]}],
                      "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels_},
         "spec": {"clusterIP": DNS_SERVICE_IP, "selector": labels_,
                  "ports": [{"name": "dns", "port": 53, "targetPort": 1053, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "targetPort": 1053, "protocol": "TCP"}]}},
    ]


# ------------------------------------------------------------------------------------ images


def ctr(node: RealNode, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([CTR, "--address", str(node.socket), "--namespace", "k8s.io", *args],
                          capture_output=True, text=True, check=check, timeout=timeout)


def image_digests(node: RealNode) -> dict[str, str]:
    """Every image name containerd holds for the CRI, with the manifest digest it points at."""
    out = ctr(node, "images", "ls", check=False, timeout=60)
    digests = {}
    for line in out.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:"):
            digests[fields[0]] = fields[2]
    return digests


def moved_tags(held: dict[str, str], pushed: dict[str, str], also_as: dict[str, str]) -> list[str]:
    """The names a node holds whose tag now points at another manifest in the registry.

    ``held``: name -> digest on the node; ``pushed``: reference -> digest the registry now serves;
    ``also_as``: registry prefix -> the public prefix the node mirrors to it (``localhost:5000/dpjob``
    -> ``ghcr.io/dpjob``), so the public name of a moved tag is forgotten too."""
    names = {}
    for ref, digest in pushed.items():
        names[ref] = digest
        for prefix, public in also_as.items():
            if ref.startswith(prefix + "/"):
                names[public + ref[len(prefix):]] = digest
    return [name for name, digest in names.items() if name in held and held[name] != digest]


def superseded(held: list[str], current: list[str]) -> list[str]:
    """Superseded dev builds (``...:dev-<name>-<key>`` of an image ``current`` names with another key)
    and the names an archive import of an earlier layout of this cache left behind."""
    def older_build(name: str) -> bool:
        repo, _, tag = name.rpartition(":")
        return tag.startswith("dev-") and name not in current and any(
            c.rpartition(":")[0] == repo and c.rpartition(":")[2].rsplit("-", 1)[0] == tag.rsplit("-", 1)[0]
            for c in current)

    return [name for name in held if name.startswith(("localhost/dpjob/", "import-")) or older_build(name)]


def forget(node: RealNode, pushed: dict[str, str], also_as: dict[str, str], current: list[str]) -> list[str]:
    """Remove moved tags and superseded builds from the node (``moved_tags``, ``superseded``): the
    kubelet pulls what is absent; a running container keeps its snapshot; containerd frees the rest."""
    held = image_digests(node)
    names = list(dict.fromkeys(moved_tags(held, pushed, also_as) + superseded(list(held), current)))
    if names:
        ctr(node, "images", "rm", *names, check=False)
    return names


# ------------------------------------------------------------------------------- cleanup


def kill_containers(node: RealNode) -> None:
    """Stop every task containerd runs for this node: the shims outlive containerd itself."""
    if not node.socket.exists():
        return
    try:
        tasks = ctr(node, "tasks", "ls", "-q", check=False, timeout=20).stdout.split()
        for task in tasks:
            ctr(node, "tasks", "kill", "-s", "SIGKILL", task, check=False, timeout=20)
        time.sleep(0.5 if tasks else 0)
        for task in tasks:
            ctr(node, "tasks", "delete", "-f", task, check=False, timeout=20)
        containers = ctr(node, "containers", "ls", "-q", check=False, timeout=20).stdout.split()
        if containers:
            ctr(node, "containers", "rm", *containers, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pass
    # Shims whose containerd is gone: find them by the socket path in their command line.
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmd and str(node.state).encode() in cmd:
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)


def unmount_under(path: Path) -> None:
    """The kubelet mounts secrets and configmaps as tmpfs under its root dir; unmount before rm."""
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return
    for mnt in sorted((m for m in mounts if m.startswith(str(path))), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def remove_network(node: RealNode) -> None:
    subprocess.run(["ip", "link", "delete", node.bridge], capture_output=True)


def ensure_cgroup_root(node: RealNode) -> None:
    """The kubelet requires its cgroupRoot to exist in every controller. Each node has its own, so
    two kubelets on one host never manage each other's pods. On cgroup v1 a new cpuset inherits
    no CPUs or memory nodes: copy the parent's, or no task could join it."""
    root = Path("/sys/fs/cgroup")
    for controller in (p for p in root.iterdir() if p.is_dir()):
        path = controller / node.cgroup_root.strip("/")
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (controller / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((controller / knob).read_text())


def remove_cgroups(node: RealNode) -> None:
    """Empty pod cgroups of a stopped node; the next kubelet recreates what it needs."""
    root = Path("/sys/fs/cgroup")
    for controller in (root.iterdir() if root.exists() else ()):
        base = controller / node.cgroup_root.strip("/")
        if base.is_dir():
            for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                base.rmdir()


def wipe(node: RealNode) -> None:
    kill_containers(node)
    unmount_under(node.state)
    remove_network(node)
    remove_cgroups(node)
    shutil.rmtree(node.state, ignore_errors=True)
