"""Node agent pure parts: env resolution and $(VAR) expansion, hosts file content, IPAM, atomic writer."""

from __future__ import annotations

import base64
import os

import pytest

from devcluster.nodeagent.env import EnvError, expand, expand_command, field_ref, parse_quantity, resolve_env
from devcluster.nodeagent.hosts import PodHost, names_for, render_hosts, render_resolv_conf
from devcluster.nodeagent.network import IPAM, veth_name
from devcluster.nodeagent.volumes import AtomicWriter, VolumeError, keyed_payload, volume_payload

pytestmark = pytest.mark.unit


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


POD = {
    "metadata": {"name": "job-rank-0", "namespace": "team", "uid": "u-1", "labels": {"app": "dp", "rank": "0"},
                 "annotations": {"dpjob.io/world-size": "4"}},
    "spec": {"nodeName": "local-0", "serviceAccountName": "trainer", "hostname": "job-rank-0", "subdomain": "job",
             "containers": [{"name": "main", "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"},
                                                           "requests": {"cpu": "500m"}}}]},
    "status": {"podIP": "10.250.0.7", "podIPs": [{"ip": "10.250.0.7"}], "hostIP": "10.250.0.1"},
}
CMS = {("team", "cfg"): {"data": {"MODE": "fast", "LR": "0.1"}, "binaryData": {"BIN": b64("bytes!")}}}
SECRETS = {("team", "creds"): {"data": {"TOKEN": b64("s3cret"), "USER": b64("alice")}}}


def get_cm(ns, name):
    return CMS.get((ns, name))


def get_secret(ns, name):
    return SECRETS.get((ns, name))


def env_of(env, **kw):
    container = {"name": "main", "env": env, **kw}
    return resolve_env(POD, container, get_cm, get_secret, node_allocatable={"cpu": "2", "memory": "8Gi"})


# --------------------------------------------------------------------------- $(VAR) expansion

@pytest.mark.parametrize("text,want", [
    ("$(A)", "a"),
    ("x-$(A)-$(B)-y", "x-a-b-y"),
    ("$$(A)", "$(A)"),                # escaped reference
    ("$$$(A)", "$a"),
    ("$(UNKNOWN)", "$(UNKNOWN)"),     # unknown stays as is
    ("$(A", "$(A"),                   # unterminated
    ("$A", "$A"),                     # shell syntax is not expanded
    ("cost: $5", "cost: $5"),
    ("trailing $", "trailing $"),
    ("$()", "$()"),
    ("", ""),
])
def test_expand(text, want):
    assert expand(text, {"A": "a", "B": "b"}) == want


def test_env_values_expand_from_earlier_vars_only():
    env = env_of([{"name": "A", "value": "1"}, {"name": "B", "value": "$(A)-$(C)"}, {"name": "C", "value": "3"}])
    assert env == {"A": "1", "B": "1-$(C)", "C": "3"}


def test_command_and_args_expand_from_container_env():
    env = env_of([{"name": "STEPS", "value": "10"}])
    cmd, args = expand_command({"command": ["sh", "-c"], "args": ["echo $(STEPS) $$(STEPS) $(HOME)"]}, env)
    assert cmd == ["sh", "-c"] and args == ["echo 10 $(STEPS) $(HOME)"]


# --------------------------------------------------------------------------- valueFrom

def test_field_refs():
    env = env_of([{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in [
        ("NAME", "metadata.name"), ("NS", "metadata.namespace"), ("UID", "metadata.uid"),
        ("APP", "metadata.labels['app']"), ("WS", "metadata.annotations['dpjob.io/world-size']"),
        ("MISSING", "metadata.labels['nope']"), ("IP", "status.podIP"), ("HOST", "status.hostIP"),
        ("NODE", "spec.nodeName"), ("SA", "spec.serviceAccountName"), ("IPS", "status.podIPs")]])
    assert env == {"NAME": "job-rank-0", "NS": "team", "UID": "u-1", "APP": "dp", "WS": "4", "MISSING": "",
                   "IP": "10.250.0.7", "HOST": "10.250.0.1", "NODE": "local-0", "SA": "trainer", "IPS": "10.250.0.7"}


def test_field_ref_unknown_path_is_an_error():
    with pytest.raises(EnvError):
        field_ref(POD, "spec.nope")


def test_resource_field_refs():
    env = env_of([
        {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "CPU_REQ_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "EPH", "valueFrom": {"resourceFieldRef": {"resource": "limits.ephemeral-storage"}}},
    ])
    assert env == {"CPU_LIMIT": "2", "CPU_REQ_M": "500", "MEM_MI": "1024", "EPH": "0"}


def test_configmap_and_secret_key_refs():
    env = env_of([
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "MODE"}}},
        {"name": "BIN", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "BIN"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
        {"name": "OPT1", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "x", "optional": True}}},
        {"name": "OPT2", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": True}}},
        {"name": "OPT3", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope", "optional": True}}},
        {"name": "OPT4", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
    ])
    assert env == {"MODE": "fast", "BIN": "bytes!", "TOKEN": "s3cret"}  # optional misses are left out


@pytest.mark.parametrize("ref,msg", [
    ({"configMapKeyRef": {"name": "nope", "key": "x"}}, 'configmap "nope" not found'),
    ({"configMapKeyRef": {"name": "cfg", "key": "nope"}}, "couldn't find key nope in ConfigMap team/cfg"),
    ({"secretKeyRef": {"name": "nope", "key": "x"}}, 'secret "nope" not found'),
    ({"secretKeyRef": {"name": "creds", "key": "nope"}}, "couldn't find key nope in Secret team/creds"),
])
def test_missing_required_refs_raise(ref, msg):
    with pytest.raises(EnvError, match=msg):
        env_of([{"name": "X", "valueFrom": ref}])


def test_env_from_with_prefix_and_override_order():
    env = env_of([{"name": "MODE", "value": "slow-$(LR)"}],
                 envFrom=[{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "creds"}, "prefix": "S_"},
                          {"configMapRef": {"name": "absent", "optional": True}}])
    assert env == {"MODE": "slow-0.1", "LR": "0.1", "BIN": "bytes!", "S_TOKEN": "s3cret", "S_USER": "alice"}
    with pytest.raises(EnvError):
        env_of([], envFrom=[{"secretRef": {"name": "absent"}}])


@pytest.mark.parametrize("q,want", [("500m", "0.5"), ("2", "2"), ("1Ki", "1024"), ("1Gi", str(2 ** 30)),
                                    ("1e3", "1000"), ("1.5G", "1500000000")])
def test_parse_quantity(q, want):
    assert parse_quantity(q) == parse_quantity(want)


# --------------------------------------------------------------------------- hosts

def test_hosts_file_lists_self_and_peers_with_fqdns():
    me = PodHost("team", "job-rank-1", "10.250.0.8", "job-rank-1", "job")
    peer = PodHost("team", "job-rank-0", "10.250.0.7", "job-rank-0", "job")
    other_ns = PodHost("other", "web", "10.250.0.9", "web", "svc")
    no_ip = PodHost("team", "pending", "")
    text = render_hosts(me, [me, peer, other_ns, no_ip], host_aliases=[{"ip": "1.2.3.4", "hostnames": ["foo"]}])
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "127.0.0.1\tlocalhost"
    assert "10.250.0.8\tjob-rank-1.job.team.svc.cluster.local job-rank-1.job.team.svc job-rank-1.job.team " \
           "job-rank-1.job job-rank-1" in lines
    assert "10.250.0.7\tjob-rank-0.job.team.svc.cluster.local job-rank-0.job.team.svc job-rank-0.job.team " \
           "job-rank-0.job job-rank-0" in lines
    # another namespace: only namespace-qualified names
    assert "10.250.0.9\tweb.svc.other.svc.cluster.local web.svc.other.svc web.svc.other" in lines
    assert "1.2.3.4\tfoo" in lines
    assert "pending" not in text
    assert lines.index("10.250.0.7\tjob-rank-0.job.team.svc.cluster.local job-rank-0.job.team.svc "
                       "job-rank-0.job.team job-rank-0.job job-rank-0") < \
        lines.index("10.250.0.9\tweb.svc.other.svc.cluster.local web.svc.other.svc web.svc.other")


def test_hosts_names_without_subdomain_and_custom_domain():
    plain = PodHost("team", "solo", "10.0.0.5")
    assert names_for(plain, "team", is_self=True) == ["solo"]
    assert names_for(plain, "elsewhere") == []
    h = PodHost("a", "p", "10.0.0.6", "h", "s")
    assert names_for(h, "a", is_self=True, cluster_domain="example.org") == [
        "h.s.a.svc.example.org", "h.s.a.svc", "h.s.a", "h.s", "h", "p"]


def test_pod_host_from_pod():
    assert PodHost.from_pod(POD, "10.250.0.7") == PodHost("team", "job-rank-0", "10.250.0.7", "job-rank-0", "job")


# --------------------------------------------------------------------------- IPAM

def test_ipam_allocate_release_persist(tmp_path):
    path = tmp_path / "ipam.json"
    ipam = IPAM("10.99.0.0/29", path)  # hosts .1-.6; .1 is the gateway
    assert ipam.gateway == "10.99.0.1" and ipam.prefixlen == 29
    a = ipam.allocate("pod-a")
    b = ipam.allocate("pod-b")
    assert (a, b) == ("10.99.0.2", "10.99.0.3")
    assert ipam.allocate("pod-a") == a  # idempotent
    assert ipam.release("pod-a") == a and ipam.lookup("pod-a") is None
    # a restarted agent sees b as taken and continues round-robin (no quick reuse of a)
    again = IPAM("10.99.0.0/29", path)
    assert again.owners() == {b: "pod-b"}
    assert again.allocate("pod-c") == "10.99.0.4"
    got = {again.allocate(f"x{i}") for i in range(3)}
    assert got == {"10.99.0.5", "10.99.0.6", "10.99.0.2"}  # wraps around, never .0/.1/.7
    with pytest.raises(RuntimeError, match="no free IP"):
        again.allocate("one-too-many")


def test_ipam_ignores_state_of_another_cidr(tmp_path):
    path = tmp_path / "ipam.json"
    IPAM("10.99.0.0/24", path).allocate("p")
    assert IPAM("10.98.0.0/24", path).owners() == {}


def test_veth_names_fit_the_kernel_limit():
    name = veth_name("0f8fad5b-d9cb-469f-a165-70867728950e")
    assert len(name) <= 15 and name.startswith("dpv")
    assert name == veth_name("0f8fad5b-d9cb-469f-a165-70867728950e")


# --------------------------------------------------------------------------- volumes

def test_atomic_writer_swaps_data_and_prunes(tmp_path):
    w = AtomicWriter(tmp_path)
    assert w.write({"a.txt": (b"one", 0o644), "dir/b": (b"two", 0o600)})
    assert (tmp_path / "a.txt").read_text() == "one" and (tmp_path / "dir" / "b").read_text() == "two"
    assert os.readlink(tmp_path / "a.txt") == "..data/a.txt"
    first = os.readlink(tmp_path / "..data")
    assert not w.write({"a.txt": (b"one", 0o644), "dir/b": (b"two", 0o600)})  # unchanged: no swap
    assert w.write({"a.txt": (b"ONE", 0o644)})
    assert (tmp_path / "a.txt").read_text() == "ONE"
    assert not (tmp_path / "dir").exists() and not (tmp_path / first).exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("..")) == ["a.txt"]
    with pytest.raises(VolumeError):
        w.write({"../escape": (b"x", 0o644)})


def test_configmap_volume_payload_items_and_optional():
    vol = {"name": "v", "configMap": {"name": "cfg", "items": [{"key": "MODE", "path": "conf/mode", "mode": 0o600}],
                                      "defaultMode": 0o640}}
    assert volume_payload(POD, vol, get_cm, get_secret) == {"conf/mode": (b"fast", 0o600)}
    full = volume_payload(POD, {"name": "v", "configMap": {"name": "cfg"}}, get_cm, get_secret)
    assert full["BIN"] == (b"bytes!", 0o644) and full["LR"] == (b"0.1", 0o644)
    assert volume_payload(POD, {"name": "v", "configMap": {"name": "absent", "optional": True}}, get_cm,
                          get_secret) == {}
    with pytest.raises(VolumeError, match='configmap "absent" not found'):
        volume_payload(POD, {"name": "v", "configMap": {"name": "absent"}}, get_cm, get_secret)
    with pytest.raises(VolumeError, match="key \"zz\""):
        keyed_payload("configmap", "cfg", {"a": b"1"}, {"items": [{"key": "zz", "path": "p"}]})


def test_secret_downward_and_projected_payloads():
    sec = volume_payload(POD, {"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o400}}, get_cm,
                         get_secret)
    assert sec == {"TOKEN": (b"s3cret", 0o400), "USER": (b"alice", 0o400)}
    down = volume_payload(POD, {"name": "d", "downwardAPI": {"items": [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}, get_cm, get_secret)
    assert down == {"labels": (b'app="dp"\nrank="0"', 0o644), "name": (b"job-rank-0", 0o644)}
    proj = volume_payload(POD, {"name": "p", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}},
        {"configMap": {"name": "cfg", "items": [{"key": "LR", "path": "lr"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
        get_cm, get_secret, get_token=lambda pod, src: "tok")
    assert proj == {"token": (b"tok", 0o644), "lr": (b"0.1", 0o644), "namespace": (b"team", 0o644)}
    assert volume_payload(POD, {"name": "e", "emptyDir": {}}, get_cm, get_secret) is None


def test_resolv_conf_fails_fast_and_searches_the_namespace():
    text = render_resolv_conf("team")
    assert "nameserver 127.0.0.1" in text and "search team.svc.cluster.local svc.cluster.local cluster.local" in text
