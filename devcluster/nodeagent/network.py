"""Pod networking: a host bridge, one network namespace + veth pair per pod, and IP allocation.

Uses ``ip`` from iproute2. The bridge holds the gateway address (first host of the CIDR), so the host
reaches pod IPs directly; pods on the same bridge reach each other over L2.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import subprocess
import threading
from pathlib import Path
from typing import Optional

log = logging.getLogger("nodeagent.network")

NETNS_PREFIX = "dpjob-"


class IPAM:
    """Allocates pod IPs from a CIDR; the allocations persist in a JSON file so that an agent restart
    does not hand out an address that a surviving pod (or a stale hosts entry) still uses.

    Allocation is round-robin (it continues after the last address handed out) so a freed address is
    not reused right away. The network address, the gateway (first host) and broadcast are never given.
    """

    def __init__(self, cidr: str, path: Path | str | None = None):
        self.network = ipaddress.ip_network(cidr, strict=False)
        if self.network.num_addresses < 4:
            raise ValueError(f"CIDR {cidr} is too small")
        self.gateway = str(self.network.network_address + 1)
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self.allocations: dict[str, str] = {}  # ip -> owner
        self.last = int(self.network.network_address + 1)
        self._load()

    @property
    def prefixlen(self) -> int:
        return self.network.prefixlen

    def _load(self) -> None:
        if not self.path or not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            log.warning("ignoring unreadable IPAM state %s", self.path)
            return
        if data.get("cidr") != str(self.network):
            log.warning("IPAM state %s is for %s, not %s; starting empty", self.path, data.get("cidr"), self.network)
            return
        self.allocations = {ip: owner for ip, owner in (data.get("allocations") or {}).items()
                            if ipaddress.ip_address(ip) in self.network}
        self.last = int(data.get("last") or self.last)

    def _save(self) -> None:
        if not self.path:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cidr": str(self.network), "last": self.last,
                                   "allocations": self.allocations}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def lookup(self, owner: str) -> Optional[str]:
        with self._lock:
            return next((ip for ip, o in self.allocations.items() if o == owner), None)

    def allocate(self, owner: str) -> str:
        """The IP of ``owner``, allocating one if it has none."""
        with self._lock:
            for ip, o in self.allocations.items():
                if o == owner:
                    return ip
            first = int(self.network.network_address) + 2
            last = int(self.network.broadcast_address) - 1
            size = last - first + 1
            start = self.last + 1
            for i in range(size):
                candidate = first + (start - first + i) % size
                ip = str(ipaddress.ip_address(candidate))
                if ip not in self.allocations:
                    self.allocations[ip] = owner
                    self.last = candidate
                    self._save()
                    return ip
            raise RuntimeError(f"no free IP left in {self.network}")

    def release(self, owner: str) -> Optional[str]:
        """Free the IP of ``owner``; returns it (None when it had none)."""
        with self._lock:
            ips = [ip for ip, o in self.allocations.items() if o == owner]
            for ip in ips:
                del self.allocations[ip]
            if ips:
                self._save()
            return ips[0] if ips else None

    def owners(self) -> dict[str, str]:
        with self._lock:
            return dict(self.allocations)


# --------------------------------------------------------------------------- ip(8) plumbing

def ip(*args: str, check: bool = True, netns: str | None = None) -> subprocess.CompletedProcess:
    cmd = ["ip"] + (["-n", netns] if netns else []) + list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return proc


def ensure_bridge(bridge: str, gateway: str, prefixlen: int) -> None:
    """Create the bridge with the gateway address if missing, and bring it up (idempotent)."""
    if ip("link", "show", "dev", bridge, check=False).returncode != 0:
        proc = ip("link", "add", bridge, "type", "bridge", check=False)
        if proc.returncode != 0 and "File exists" not in proc.stderr:
            raise RuntimeError(f"cannot create bridge {bridge}: {proc.stderr.strip()}")
    addrs = ip("-o", "-4", "addr", "show", "dev", bridge).stdout
    if f" {gateway}/" not in addrs:
        proc = ip("addr", "add", f"{gateway}/{prefixlen}", "dev", bridge, check=False)
        if proc.returncode != 0 and "File exists" not in proc.stderr:
            raise RuntimeError(f"cannot add {gateway}/{prefixlen} to {bridge}: {proc.stderr.strip()}")
    ip("link", "set", bridge, "up")


def netns_name(uid: str) -> str:
    return f"{NETNS_PREFIX}{uid}"


def veth_name(uid: str) -> str:
    """Host side of a pod's veth pair: at most 15 characters, derived from the pod UID."""
    return "dpv" + hashlib.sha1(uid.encode()).hexdigest()[:11]


def netns_exists(ns: str) -> bool:
    return Path("/run/netns", ns).exists()


def setup_pod_network(uid: str, pod_ip: str, prefixlen: int, gateway: str, bridge: str) -> str:
    """Network namespace ``dpjob-<uid>`` with eth0=pod_ip (via a veth on ``bridge``) and lo up."""
    ns, veth = netns_name(uid), veth_name(uid)
    teardown_pod_network(uid)  # leftovers of an earlier attempt
    ip("netns", "add", ns)
    try:
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", bridge, "up")
        ip("addr", "add", f"{pod_ip}/{prefixlen}", "dev", "eth0", netns=ns)
        ip("link", "set", "eth0", "up", netns=ns)
        ip("link", "set", "lo", "up", netns=ns)
        ip("route", "add", "default", "via", gateway, netns=ns)
    except Exception:
        teardown_pod_network(uid)
        raise
    return ns


def teardown_pod_network(uid: str) -> None:
    """Remove the pod's veth and network namespace (and /etc/netns/<ns>); missing pieces are fine."""
    ns, veth = netns_name(uid), veth_name(uid)
    if ip("link", "show", "dev", veth, check=False).returncode == 0:
        ip("link", "del", veth, check=False)
    if netns_exists(ns):
        ip("netns", "del", ns, check=False)
    etc = Path("/etc/netns", ns)
    if etc.exists():
        for f in etc.iterdir():
            try:
                f.unlink()
            except OSError:
                pass
        try:
            etc.rmdir()
        except OSError:
            pass


def hosts_path(uid: str) -> Path:
    """The file ``ip netns exec`` bind-mounts over /etc/hosts for the pod's processes."""
    return Path("/etc/netns", netns_name(uid), "hosts")


def resolv_conf_path(uid: str) -> Path:
    return Path("/etc/netns", netns_name(uid), "resolv.conf")


def write_in_place(path: Path, content: str) -> bool:
    """Rewrite ``path`` in place (same inode: a bind mount of it keeps seeing the new content).
    Returns whether the content changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(content)
        return True
    with open(path, "r+") as f:
        if f.read() == content:
            return False
        f.seek(0)
        f.write(content)
        f.truncate()
    return True
