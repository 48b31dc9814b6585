"""The dev cluster's own iptables rules: masquerading what leaves the pod network, and steering pod
traffic to the NetworkPolicy engine's queue. Standard library only.

Why masquerade here and not in the CNI bridge: with several real nodes, a pod on ``real-1`` must
reach a pod on ``real-0`` with its own source address (a NetworkPolicy decides on it, and so does
a rendezvous that checks its peers). The bridge plugin's ``ipMasq`` would rewrite every packet
leaving a bridge, node-to-node pod traffic included, so the bridges run without it and one rule
masquerades only what leaves ``10.88.0.0/16`` (the API server, the registry, the host).

Why steer with iptables: the engine (kube-network-policies, devcluster/netpol.py) judges each new
connection it reads from netfilter queue 100, and queues packets with nftables' ``queue``
expression, which this kernel lacks (``CONFIG_NFT_QUEUE`` unset: its rule sync fails with
``netlink receive: no such file or directory``). The xtables ``NFQUEUE`` target is present, so the
same steering is written here: new connections to or from a pod go to the queue; established
ones, and the host's own root processes (the kubelet's probes, a host Prometheus, the tests),
are not queued. ``--queue-bypass`` lets traffic through while no engine listens, as the engine's
own rules do with ``bypass``: isolation is a guard, never a reason to cut a cluster off.
"""

from __future__ import annotations

import subprocess

from devcluster.realnode_layout import POD_SUBNET

MASQ_CHAIN, STEER_CHAIN = "DPJOB-POD-MASQ", "DPJOB-NETPOL"
QUEUE = 100
# (table, built-in chain, our chain, our chain's rules)
MASQ = ("nat", "POSTROUTING", MASQ_CHAIN,
        [["-s", POD_SUBNET, "!", "-d", POD_SUBNET, "-j", "MASQUERADE"]])
STEER = ("mangle", "POSTROUTING", STEER_CHAIN,
         [["-m", "conntrack", "!", "--ctstate", "NEW", "-j", "RETURN"],
          ["-m", "owner", "--uid-owner", "0", "-j", "RETURN"],
          ["-d", POD_SUBNET, "-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"],
          ["-s", POD_SUBNET, "-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"]])


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"iptables {' '.join(args)} failed: {out.stderr.strip()}")
    return out


def _install(spec: tuple[str, str, str, list[list[str]]]) -> None:
    """Create (or refill) our chain and jump to it once from the built-in chain: idempotent."""
    table, hook, chain, rules = spec
    if _iptables("-t", table, "-N", chain, check=False).returncode != 0:
        _iptables("-t", table, "-F", chain)
    for rule in rules:
        _iptables("-t", table, "-A", chain, *rule)
    if _iptables("-t", table, "-C", hook, "-j", chain, check=False).returncode != 0:
        _iptables("-t", table, "-A", hook, "-j", chain)


def _remove(spec: tuple[str, str, str, list[list[str]]]) -> None:
    table, hook, chain, _ = spec
    while _iptables("-t", table, "-D", hook, "-j", chain, check=False).returncode == 0:
        pass
    _iptables("-t", table, "-F", chain, check=False)
    _iptables("-t", table, "-X", chain, check=False)


def masquerade_pod_egress() -> None:
    _install(MASQ)


def steer_to_engine() -> None:
    _install(STEER)


def stop_steering() -> None:
    _remove(STEER)


def remove_all() -> None:
    """``make cluster-down``: no rule of ours outlives the cluster."""
    for spec in (STEER, MASQ):
        _remove(spec)


def steering() -> bool:
    return _iptables("-t", "mangle", "-C", "POSTROUTING", "-j", STEER_CHAIN, check=False).returncode == 0
