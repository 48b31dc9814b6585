"""Leaving no trace of a stopped real node: its containers and shims, the kubelet's mounts, its CNI
bridge and its cgroups; and the cgroup root a starting kubelet needs. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from devcluster.realnode_images import ctr
from devcluster.realnode_layout import RealNode


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


def kill_strays(node: RealNode) -> None:
    """A containerd or kubelet of this node that no pid file names (an interrupted ``up`` started
    it): a second containerd would wait for ever on the first one's lock of the shared content store."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(cmd[0].decode(errors="replace")).name in ("containerd", "kubelet") and \
                any(str(node.state).encode() in arg for arg in cmd[1:]):
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
    kill_strays(node)
    unmount_under(node.state)
    remove_network(node)
    remove_cgroups(node)
    shutil.rmtree(node.state, ignore_errors=True)
