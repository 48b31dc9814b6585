"""Real nodes added, removed, stopped and revived on a running dev cluster: what the multi-node
tests and their node-loss drills do (``cluster.py node add|remove N``). Standard library only.

Every real node shares the host's network namespace; each has its own bridge and subnet, and the
host routes between them (the bridges are gateways, so the kernel forwards). kube-proxy and CoreDNS
already serve every node: adding one starts only its containerd and kubelet.
"""

from __future__ import annotations

from pathlib import Path

from devcluster import realnode
from devcluster.kube import kubectl
from devcluster.pki import advertise_address
from devcluster.processes import alive, log, read_pid, revive, stop
from devcluster.real_nodes import built_images, node_ready, start_real_node
from devcluster.state import ALL_NODES, BIN, MAX_REAL_NODES
from devcluster.waits import wait_until


def node(index: int) -> realnode.RealNode:
    if not 0 <= index < MAX_REAL_NODES:
        raise SystemExit(f"real node {index}: the dev cluster has real nodes 0 to {MAX_REAL_NODES - 1}")
    return ALL_NODES[index]


def running_nodes() -> list[realnode.RealNode]:
    """The real nodes whose kubelet runs now."""
    return [n for n in ALL_NODES if alive(read_pid(f"kubelet-{n.index}"))]


def add_node(index: int, bin_dir: Path | None = None) -> realnode.RealNode:
    """Start real node ``index`` (containerd + kubelet) and wait until it is Ready; idempotent."""
    target = node(index)
    if target in running_nodes() and node_ready(target.name):
        return target
    bin_dir = bin_dir or (BIN / "kubectl").resolve().parent
    stop_node_processes(target)
    start_real_node(bin_dir, target, advertise_address(), built_images(("pause",))["pause"])
    return target


def stop_component(component: str) -> None:
    """Stop one process of a node (``kubelet-1``, ``containerd-1``) as a crash would leave it: the
    node's containers keep running (a kubelet or containerd stop does not kill them)."""
    pid = read_pid(component)
    if pid and alive(pid):
        stop(pid, timeout=10, poll=0.1)
        log(f"stopped {component} (pid {pid})")


def revive_component(component: str) -> bool:
    """Start a stopped ``kubelet-N`` / ``containerd-N`` again with the command line it ran with."""
    return revive(component)


def stop_node_processes(target: realnode.RealNode) -> None:
    """The kubelet first (so it does not restart containers), then the containers, then containerd."""
    stop_component(f"kubelet-{target.index}")
    if alive(read_pid(f"containerd-{target.index}")):
        realnode.kill_containers(target)
    stop_component(f"containerd-{target.index}")


def remove_node(index: int) -> None:
    """Stop the node, leave no trace of it on the host, and delete its Node object (its pods go)."""
    target = node(index)
    stop_node_processes(target)
    realnode.wipe(target)
    kubectl("delete", "node", target.name, "--ignore-not-found", "--wait=false", check=False)
    wait_until(lambda: kubectl("get", "node", target.name, check=False).returncode != 0, 60, 0.5,
               what=f"node {target.name} deleted")
    log(f"real node {target.name} removed")
