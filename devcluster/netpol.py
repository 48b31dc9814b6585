"""A NetworkPolicy engine for the dev cluster: kube-network-policies v0.8.0, SIG Network's reference
implementation, built from its Go module (devcluster/build-netpol.sh) into an image pulled from the
dev registry.

Why this engine: it enforces the standard ``networking.k8s.io/v1`` NetworkPolicy and nothing else,
judging each new connection in user space from a netfilter queue, so it needs neither a CNI of its
own nor kernel features beyond the queue. Its own nftables rules cannot load on this kernel
(``CONFIG_NFT_QUEUE`` unset); devcluster/netfilter.py writes the same steering with iptables'
``NFQUEUE`` target, which the kernel has. kube-router v2.1.0 (iptables + ipset) would also fit the
kernel, but that version is flagged for reported security flaws; Cilium needs eBPF features and a
CNI of its own.

It runs as one replica on ``real-0``: every real node shares the host's network namespace, so one
engine sees the packets of every node's bridge.

``python devcluster/netpol.py install|uninstall|status`` (``make netpol`` installs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import addon, netfilter  # noqa: E402
from devcluster.kube import kubectl  # noqa: E402
from devcluster.workloads import node_images  # noqa: E402

MANIFEST = REPO / "devcluster" / "manifests" / "kube-network-policies.yaml"
NAMESPACE, NAME = "kube-system", "kube-network-policies"


def manifests(image: str) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return docs


def _list(docs: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})


def install(timeout: float = 180) -> str:
    """Install (or update) the engine and steer pod traffic to it; returns its image."""
    image = node_images(NAME)[NAME]
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=_list(manifests(image)))
    rollout = kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{NAME}", f"--timeout={int(timeout)}s",
                      check=False, timeout=timeout + 30)
    if rollout.returncode != 0:
        raise SystemExit(f"netpol: the engine did not become ready: {rollout.stderr.strip()}\n{diagnosis()}")
    netfilter.steer_to_engine()
    return image


def uninstall() -> None:
    """Stop steering first (traffic never waits on a queue nobody reads), then remove the engine."""
    netfilter.stop_steering()
    kubectl("delete", "--ignore-not-found", "--wait=true", "--timeout=60s", "-f", "-",
            stdin=_list(manifests("unused")), check=False, timeout=90)


def installed() -> bool:
    out = kubectl("-n", NAMESPACE, "get", "deployment", NAME, "-o", "jsonpath={.status.readyReplicas}", check=False)
    return out.returncode == 0 and out.stdout == "1" and netfilter.steering()


def diagnosis() -> str:
    pods = kubectl("-n", NAMESPACE, "get", "pods", "-l", f"app={NAME}", "-o", "wide", check=False).stdout
    logs = kubectl("-n", NAMESPACE, "logs", f"deployment/{NAME}", "--tail=30", check=False).stdout
    return f"{pods}\n{logs}"


def main() -> int:
    return addon.main("netpol", __doc__.splitlines()[0], install, uninstall, installed)


if __name__ == "__main__":
    raise SystemExit(main())
