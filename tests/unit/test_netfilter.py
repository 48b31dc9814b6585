"""The dev cluster's own iptables rules (devcluster/netfilter.py) and the NetworkPolicy engine's
manifest (devcluster/netpol.py): what they match decides whether pods on two nodes can talk with
their own addresses and whether the engine sees the connections it must judge."""

from __future__ import annotations

import pytest

from devcluster import netfilter, netpol
from devcluster.realnode_layout import POD_SUBNET

pytestmark = pytest.mark.unit


def test_only_traffic_leaving_the_pod_network_is_masqueraded():
    table, hook, _, rules = netfilter.MASQ
    assert (table, hook) == ("nat", "POSTROUTING")
    assert rules == [["-s", POD_SUBNET, "!", "-d", POD_SUBNET, "-j", "MASQUERADE"]]


def test_new_pod_connections_go_to_the_engine_queue_and_nothing_else_waits_on_it():
    table, hook, _, rules = netfilter.STEER
    assert (table, hook) == ("mangle", "POSTROUTING")
    # Established connections and the host's root processes return before any queue rule.
    first_queue = next(i for i, r in enumerate(rules) if "NFQUEUE" in r)
    early = [" ".join(r) for r in rules[:first_queue]]
    assert any("! --ctstate NEW -j RETURN" in r for r in early)
    assert any("--uid-owner 0 -j RETURN" in r for r in early)
    queued = [r for r in rules if "NFQUEUE" in r]
    assert {(r[0], r[1]) for r in queued} == {("-d", POD_SUBNET), ("-s", POD_SUBNET)}
    assert all(r[-3:] == ["--queue-num", str(netfilter.QUEUE), "--queue-bypass"] for r in queued)


def test_the_engine_reads_the_queue_the_rules_fill_on_the_first_node_with_what_it_needs():
    docs = {d["kind"]: d for d in netpol.manifests("registry/netpol:1")}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry/netpol:1"
    assert f"--nfqueue-id={netfilter.QUEUE}" in container["args"]
    assert "--disable-nri" in container["args"]
    assert pod["hostNetwork"] and pod["nodeSelector"] == {"kubernetes.io/hostname": "real-0"}
    assert "NET_ADMIN" in container["securityContext"]["capabilities"]["add"]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])) for r in docs["ClusterRole"]["rules"]}
    assert (("networking.k8s.io",), ("networkpolicies",)) in rules
