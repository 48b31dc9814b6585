"""Real nodes: the OCI registry they pull from, containerd + kubelet per node, kube-proxy and CoreDNS,
and the images built here and pushed to that registry. What each node's configuration files say is
devcluster/realnode.py's (pure builders); this module starts the processes. Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

from devcluster import netfilter, publish, realnode, registry
from devcluster.kube import kubectl
from devcluster.pki import cert_kubeconfig, issue_cert
from devcluster.processes import log, port_open, start, wait_for
from devcluster.state import ALL_NODES, LOGS, NODES, REPO, RUN


def start_registry(bin_dir: Path) -> None:
    """The OCI registry the nodes pull from, on a loopback port; its storage outlives the cluster.
    Blobs of manifests deleted since the last start are freed first (the registry must be down)."""
    config = RUN / "registry.yml"
    config.write_text(registry.config())
    registry.STORAGE.mkdir(parents=True, exist_ok=True)
    if port_open(registry.PORT):
        raise SystemExit(f"port {registry.PORT} is already in use by another process; stop it or set "
                         "DPJOB_REGISTRY_PORT")
    gc = registry.garbage_collect(bin_dir / "registry", config) if registry.has_repositories() else None
    if gc is not None and gc.returncode != 0:
        log(f"registry garbage-collect failed (the registry starts anyway): {gc.stderr.strip()[-300:]}")
    start("registry", registry.command(bin_dir / "registry", config))
    wait_for(f"the registry on {registry.HOST}", registry.ready, 30, "registry")


def built_images(names: tuple[str, ...] = ("pause", "coredns", "operator", "trainer")) -> dict[str, str]:
    """Build (or reuse) the images and push them to the dev registry: name -> the reference to run.

    A tag the push moved (``trainer:cpu`` after a trainer change) is forgotten on the running nodes,
    so the next pod that names it pulls the new build."""
    pushed = publish.push_images(registry.DEV_REPOSITORY, list(names), publish.source_version(), dev=True)
    forget_on_nodes(pushed)
    return {name: ref for name, (ref, _) in pushed.items()}


def forget_on_nodes(pushed: dict[str, tuple[str, dict[str, str]]]) -> None:
    """After a push to the dev registry: each running node forgets the tags that moved and the
    superseded dev builds (``publish.push_images``'s result)."""
    digests = {ref: digest for _, tags in pushed.values() for ref, digest in tags.items()}
    for node in ALL_NODES:
        if node.socket.exists():
            realnode.forget(node, digests, {registry.DEV_REPOSITORY: registry.PUBLIC_REPOSITORY},
                            [ref for ref, _ in pushed.values()])


def start_real_nodes(bin_dir: Path, adv: str) -> None:
    """Every real node, then kube-proxy (on the first) and CoreDNS (on the nodes)."""
    subprocess.run(["bash", str(REPO / "devcluster" / "sysdeps.sh"), "node"], check=True)
    netfilter.masquerade_pod_egress()
    images = built_images()
    for node in NODES:
        start_real_node(bin_dir, node, adv, images["pause"])
    start_kube_proxy(bin_dir, NODES[0])
    install_coredns(images["coredns"])


def write_node_config(node: realnode.RealNode, adv: str, pause_image: str) -> Path:
    """The node's containerd, CNI and kubelet configuration and certificates; returns its kubeconfig."""
    for sub in ("containerd", "cni", "pki", "kubelet"):
        (node.state / sub).mkdir(parents=True, exist_ok=True)
    (node.state / "containerd" / "config.toml").write_text(realnode.containerd_config(node, pause_image))
    registry.write_node_hosts(node.registry_hosts)
    (node.state / "cni" / "10-dpjob.conflist").write_text(json.dumps(realnode.cni_config(node), indent=2))
    pki = RUN / "pki"
    issue_cert(pki, "kubelet", f"/CN={node.name}", "serverAuth", [f"IP:{adv}", "IP:127.0.0.1", f"DNS:{node.name}"],
               out_dir=node.state / "pki")
    issue_cert(pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{node.name}", "clientAuth",
               out_dir=node.state / "pki")
    kubeconfig = cert_kubeconfig(node.state / "kubelet.kubeconfig", node.state / "pki" / "kubelet-client.crt",
                                 node.state / "pki" / "kubelet-client.key")
    (node.state / "kubelet.yaml").write_text(realnode.kubelet_config(node, pki))
    return kubeconfig


def start_real_node(bin_dir: Path, node: realnode.RealNode, adv: str, pause_image: str) -> None:
    """containerd + kubelet for one node; its pods get CNI addresses in ``node.subnet``."""
    t0 = time.monotonic()
    realnode.wipe(node)  # whatever a killed run left: containers, mounts, the bridge
    kubeconfig = write_node_config(node, adv, pause_image)
    component = f"containerd-{node.index}"
    containerd_log = LOGS / f"{component}.log"
    log_offset = containerd_log.stat().st_size if containerd_log.exists() else 0
    start(component, [realnode.CONTAINERD, "--config", str(node.state / "containerd" / "config.toml")])

    def cri_ready() -> bool:
        """containerd answers, and its CRI plugin has finished initialising: the kubelet exits at
        once on "server is not initialized yet", which containerd answers until it has recovered
        its state and started the streaming server, its last step (it logs that line then)."""
        with open(containerd_log, "rb") as f:
            f.seek(log_offset)
            initialised = b"Start streaming server" in f.read()
        return initialised and realnode.ctr(node, "version", check=False, timeout=5).returncode == 0

    wait_for(f"containerd of {node.name} (its CRI initialised)", cri_ready, 30, component)
    labels = ",".join(f"{k}={v}" for k, v in realnode.labels(node).items())
    realnode.ensure_cgroup_root(node)
    component = f"kubelet-{node.index}"
    start(component, [str(bin_dir / "kubelet"), f"--config={node.state / 'kubelet.yaml'}",
                      f"--kubeconfig={kubeconfig}", f"--hostname-override={node.name}", f"--node-ip={adv}",
                      f"--node-labels={labels}", f"--root-dir={node.state / 'kubelet'}",
                      f"--cert-dir={node.state / 'pki'}", "--v=1"])
    wait_for(f"node {node.name} Ready", lambda: node_ready(node.name), 90, component)
    log(f"real node {node.name} Ready in {time.monotonic() - t0:.1f}s (kubelet + containerd, pods in {node.subnet})")


def start_kube_proxy(bin_dir: Path, node: realnode.RealNode) -> None:
    pki = RUN / "pki"
    kubeconfig = cert_kubeconfig(RUN / "kube-proxy.kubeconfig", pki / "kube-proxy.crt", pki / "kube-proxy.key")
    cfg = RUN / "kube-proxy.yaml"
    cfg.write_text(realnode.kube_proxy_config(node, kubeconfig))
    start("kube-proxy", [str(bin_dir / "kube-proxy"), f"--config={cfg}", "--v=1"])
    wait_for("kube-proxy /healthz", lambda: urllib.request.urlopen("http://127.0.0.1:10256/healthz",
                                                                   timeout=1).status == 200, 60, "kube-proxy")


def install_coredns(image: str) -> None:
    docs = realnode.coredns_manifests(image, {"dpjob.io/pool": realnode.POOL})
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    out = kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s", check=False)
    if out.returncode != 0:
        pods = kubectl("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "wide", check=False).stdout
        raise SystemExit(f"CoreDNS did not become ready: {out.stderr.strip()}\n{pods}")


def node_ready(name: str) -> bool:
    out = kubectl("get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return out.returncode == 0 and out.stdout == "True"
