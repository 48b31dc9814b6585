#!/usr/bin/env python3
"""Start and stop dpjob's local Kubernetes cluster from binaries built by ``devcluster/build.sh``:
the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), kwok node pools
for scale and GPU/NPU simulation, and real nodes (kubelet + containerd, kube-proxy, CoreDNS; see
devcluster/realnode.py) where pods run as containers from images built by devcluster/images.sh,
pushed to the cluster's own OCI registry (devcluster/registry.py) and pulled from it by the kubelet.

Why a script of our own instead of kwokctl: this machine has no default container runtime, and
we want exactly the flags that matter for the operator (RBAC, token auth, service-account
signing, high client QPS) with every process started by pid so ``down`` stops only what ``up``
started. Standard library only: it runs before the project's virtual environment exists.

This module is the entry point (``up``, ``down``, ``status``, ``restart``) and keeps ``up`` to
the order of steps; each step lives in the module for its concern: ``state`` (paths, ports,
settings), ``processes`` (pids, logs, waits), ``pki`` (certificates, kubeconfigs),
``control_plane``, ``kwok_pools``, ``real_nodes``; configuration files are YAML in
``devcluster/manifests/``. State lives in ``<repo>/.devcluster/``: ``kubeconfig``, ``bin/``
(kubectl, helm), ``logs/``, ``run/`` (pki, etcd data, kwok config) and ``pids/``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import netfilter, realnode  # noqa: E402
from devcluster.control_plane import api_get, restart, start_apiserver, start_controllers, start_etcd  # noqa: E402
from devcluster.kube import kubectl  # noqa: E402
from devcluster.kwok_pools import PoolSpec, create_nodes, default_pools, ensure_device_plugin, node_manifest, start_kwok  # noqa: E402
from devcluster.pki import advertise_address, make_pki, write_kubeconfig  # noqa: E402
from devcluster.processes import alive, log, port_open, read_pid, start, stop  # noqa: E402
from devcluster.real_nodes import built_images, forget_on_nodes, start_real_nodes, start_registry  # noqa: E402
from devcluster.state import (  # noqa: E402
    ALL_NODES,
    APISERVER_PORT,
    BIN,
    COMPONENTS,
    CONTROL_PLANE,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    GANG_SCHEDULING,
    KUBECONFIG,
    LOGS,
    NODE_COMPONENTS,
    NODES,
    PIDS,
    RUN,
    STATE,
)

# What the tests, the benchmarks and devcluster/stack.py read from here (``devcluster.cluster.NODES``).
__all__ = ["BIN", "CONTROL_PLANE", "GANG_SCHEDULING", "KUBECONFIG", "LOGS", "NODES", "PIDS", "RUN", "STATE",
           "PoolSpec", "alive", "built_images", "cluster_is_up", "default_pools", "down", "forget_on_nodes",
           "kubectl", "node_manifest", "read_pid", "restart", "start", "status", "up"]


def cluster_is_up() -> bool:
    return all(alive(read_pid(c)) for c in ("registry", *CONTROL_PLANE, *NODE_COMPONENTS)) and \
        KUBECONFIG.exists() and api_get("/readyz")[0] == 200


def up(bin_dir: Path, python: str | None) -> None:
    t0 = time.monotonic()
    for d in (RUN, LOGS, PIDS, BIN):
        d.mkdir(parents=True, exist_ok=True)
    if cluster_is_up():
        log(f"cluster already up (kubeconfig {KUBECONFIG})")
        ensure_device_plugin(python)
        if NODES:  # images whose inputs changed since the node started
            built_images()
        return
    # A half-started or crashed cluster: stop whatever is left and start clean.
    down(quiet=True)
    prepare(bin_dir)
    start_registry(bin_dir)
    adv = advertise_address()
    make_pki(adv)
    write_kubeconfig()
    start_etcd(bin_dir)
    start_apiserver(bin_dir, adv)
    start_controllers(bin_dir)
    start_kwok(bin_dir)
    kwok_nodes = create_nodes()
    ensure_device_plugin(python)
    if NODES:
        start_real_nodes(bin_dir, adv)
    log(f"cluster up in {time.monotonic() - t0:.1f}s: {kwok_nodes} kwok nodes, {len(NODES)} real node(s); "
        f"export KUBECONFIG={KUBECONFIG} PATH={BIN}:$PATH")


def prepare(bin_dir: Path) -> None:
    """The state directories, kubectl and helm linked into ``bin/``, and the cluster's ports free."""
    for d in (RUN, LOGS, PIDS, BIN):
        d.mkdir(parents=True, exist_ok=True)
    for tool in ("kubectl", "helm"):
        link = BIN / tool
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(bin_dir / tool)
    for port in (ETCD_CLIENT_PORT, ETCD_PEER_PORT, APISERVER_PORT):
        if port_open(port):
            raise SystemExit(f"port {port} is already in use by another process; stop it or set DPJOB_ETCD_PORT/"
                             "DPJOB_APISERVER_PORT")


def down(quiet: bool = False) -> None:
    """Stop exactly the processes ``up`` started (by pid), then remove the state."""
    for component in reversed(COMPONENTS):
        pid = read_pid(component)
        if component.startswith("containerd-") and alive(pid):  # its containers first: shims outlive it
            realnode.kill_containers(ALL_NODES[int(component.split("-")[1])])
        if pid and alive(pid):
            stop(pid, timeout=10, poll=0.1)
            if not quiet:
                log(f"stopped {component} (pid {pid})")
    for node in ALL_NODES:
        if node in NODES or node.state.exists():
            realnode.wipe(node)
    if NODES and (BIN / "kubectl").is_symlink():  # kube-proxy's iptables chains outlive it
        subprocess.run([str((BIN / "kubectl").resolve().parent / "kube-proxy"), "--cleanup"], capture_output=True)
    if shutil.which("iptables"):
        netfilter.remove_all()
    if STATE.exists():
        for sub in ("run", "pids", "kubeconfig", "prometheus"):
            p = STATE / sub
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
    if not quiet:
        log("cluster down")


def status() -> int:
    for component in COMPONENTS:
        pid = read_pid(component)
        if component not in ("registry", *CONTROL_PLANE, *NODE_COMPONENTS) and not alive(pid):
            continue  # started on top of the cluster, or a node added at run time: listed while it runs
        print(f"{component:26s} {'running' if alive(pid) else 'stopped'} {pid or ''}")
    ok = KUBECONFIG.exists() and cluster_is_up()
    print(f"api: {'ready' if ok else 'not ready'}  kubeconfig: {KUBECONFIG}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the cluster (idempotent)")
    p_up.add_argument("--bin-dir", required=True, type=Path, help="directory printed by devcluster/build.sh")
    p_up.add_argument("--python", help="venv python for the simulated Ascend device plugin")
    sub.add_parser("down", help="stop what `up` started and remove the state")
    sub.add_parser("status", help="show component state")
    p_restart = sub.add_parser("restart", help="stop and start one control-plane component (chaos drills)")
    p_restart.add_argument("component", choices=CONTROL_PLANE)
    p_node = sub.add_parser("node", help="add or remove one real node on the running cluster")
    p_node.add_argument("action", choices=("add", "remove"))
    p_node.add_argument("index", type=int, help="the node's number: real-<index>")
    args = parser.parse_args()
    if args.cmd == "node":
        from devcluster import node_changes
        if args.action == "add":
            node_changes.add_node(args.index)
        else:
            node_changes.remove_node(args.index)
        return 0
    if args.cmd == "up":
        up(args.bin_dir.resolve(), args.python)
        return 0
    if args.cmd == "down":
        down()
        return 0
    if args.cmd == "restart":
        log(f"{args.component} restarted, unavailable for {restart(args.component):.1f}s")
        return 0
    return status()


if __name__ == "__main__":
    sys.exit(main())
