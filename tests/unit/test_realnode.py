"""devcluster/realnode.py's pure parts: the settings without which a pod fails on this machine kind
(each one cost a failed pod once), and how a node reaches the dev registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devcluster import prometheus as promsupport
from devcluster import realnode

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
NODES = [realnode.RealNode(i, Path(f"/state/node-{i}")) for i in range(2)]


@pytest.mark.parametrize("setting", [
    "restrict_oom_score_adj = true",             # root lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj
    'runtime_type = "io.containerd.runc.v2"',    # crun refuses the hybrid cgroup layout
    'sandbox_image = "localhost:5000/dpjob/pause:3.10-abc"',  # the pause image built here, from the registry
    'bin_dir = "/usr/lib/cni"',                  # Debian's containernetworking-plugins
    'config_path = "/state/node-0/containerd/certs.d"',  # hosts.toml: the dev registry and its mirrors
])
def test_containerd_config_carries_the_settings_this_machine_needs(setting):
    assert setting in realnode.containerd_config(NODES[0], "localhost:5000/dpjob/pause:3.10-abc")


def test_kubelet_config_runs_on_cgroup_v1_and_points_at_cluster_dns():
    cfg = json.loads(realnode.kubelet_config(NODES[0], Path("/pki")))
    assert cfg["failCgroupV1"] is False and cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["clusterDNS"] == [realnode.DNS_SERVICE_IP] and cfg["clusterDomain"] == "cluster.local"
    assert cfg["authentication"]["anonymous"]["enabled"] is False  # kubectl logs needs the client cert
    assert cfg["authentication"]["x509"]["clientCAFile"] == "/pki/ca.crt"
    assert cfg["registerWithTaints"] == [realnode.TAINT]
    assert cfg["containerRuntimeEndpoint"] == f"unix://{NODES[0].socket}"


def test_each_kubelet_keeps_its_pods_logs_where_no_other_kubelet_removes_them():
    # A kubelet's container GC deletes the pod log directories of pods it does not run: on one
    # shared directory, real-0 would delete the logs of real-1's pods.
    dirs = [json.loads(realnode.kubelet_config(n, Path("/pki")))["podLogsDir"] for n in NODES]
    assert dirs == ["/state/node-0/pod-logs", "/state/node-1/pod-logs"]


def test_two_nodes_never_share_a_subnet_bridge_port_socket_or_cgroup():
    for attr in ("subnet", "bridge", "kubelet_port", "socket", "cgroup_root", "containerd_root", "pod_logs_dir",
                 "name"):
        assert len({getattr(n, attr) for n in NODES}) == 2, attr
    nets = [realnode.cni_config(n)["plugins"][0] for n in NODES]
    assert [n["ipam"]["ranges"][0][0]["subnet"] for n in nets] == ["10.88.0.0/24", "10.88.1.0/24"]
    assert all(n["isGateway"] and n["hairpinMode"] for n in nets)
    # Pod-to-pod traffic between the bridges keeps its source address (netfilter.py masquerades
    # only what leaves the pod network).
    assert not any(n["ipMasq"] for n in nets)


def test_coredns_serves_cluster_local_on_the_kube_dns_service_ip_as_non_root():
    docs = {d["kind"]: d for d in realnode.coredns_manifests("img:1", {"dpjob.io/pool": "real"})}
    assert docs["Service"]["spec"]["clusterIP"] == realnode.DNS_SERVICE_IP
    assert {p["port"] for p in docs["Service"]["spec"]["ports"]} == {53}
    assert "kubernetes cluster.local" in docs["ConfigMap"]["data"]["Corefile"]
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and realnode.TOLERATION in pod["tolerations"]


HELD = {"localhost:5000/dpjob/trainer:cpu": "sha256:old", "ghcr.io/dpjob/trainer:cpu": "sha256:old",
        "ghcr.io/dpjob/trainer:cuda": "sha256:new", "localhost:5000/dpjob/trainer:dev-trainer-aaaaaaaaaaaa": "sha256:a",
        "localhost:5000/dpjob/trainer:dev-trainer-mindspore-bbbbbbbbbbbb": "sha256:b",
        "localhost/dpjob/trainer:dev-cccccccccccc": "sha256:c", "import-2026-11-27:x": "sha256:c"}


@pytest.mark.parametrize(("pushed", "moved"), [
    # the trainer changed: :cpu moved, under the registry's name and the mirrored public one
    ({"localhost:5000/dpjob/trainer:cpu": "sha256:new"},
     ["localhost:5000/dpjob/trainer:cpu", "ghcr.io/dpjob/trainer:cpu"]),
    # pushed again unchanged: nothing to pull again
    ({"localhost:5000/dpjob/trainer:cuda": "sha256:new"}, []),
    # a tag the node never pulled: nothing to forget
    ({"localhost:5000/dpjob/dpjob-operator:0.1.0": "sha256:x"}, []),
])
def test_a_tag_that_moved_in_the_registry_is_forgotten_so_the_next_pod_pulls_it(pushed, moved):
    assert realnode.moved_tags(HELD, pushed, {"localhost:5000/dpjob": "ghcr.io/dpjob"}) == moved


def test_superseded_dev_builds_and_imported_names_are_removed_but_not_another_images_builds():
    current = ["localhost:5000/dpjob/trainer:dev-trainer-dddddddddddd"]
    assert realnode.superseded(list(HELD), current) == [
        "localhost:5000/dpjob/trainer:dev-trainer-aaaaaaaaaaaa",  # the trainer's older build
        "localhost/dpjob/trainer:dev-cccccccccccc", "import-2026-11-27:x"]  # an archive import's names
    # the MindSpore build in the same repository is another image: kept


def test_cluster_prometheus_relabels_trainer_pods_like_the_charts_pod_monitor():
    cfg = json.loads(promsupport.render_cluster_config("/kubeconfig", ["127.0.0.1:8080"]))
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    trainer = jobs[promsupport.TRAINER_JOB]
    assert trainer["kubernetes_sd_configs"] == [{"role": "pod", "kubeconfig_file": "/kubeconfig"}]
    targets = {r.get("target_label"): r["source_labels"][0] for r in trainer["relabel_configs"] if "target_label" in r}
    # The chart's PodMonitor relabelings (templates/podmonitor.yaml) plus the two the Prometheus
    # Operator adds to every pod target.
    assert targets == {"namespace": "__meta_kubernetes_namespace", "pod": "__meta_kubernetes_pod_name",
                       "dpjob_job": "__meta_kubernetes_pod_label_dpjob_io_job_name",
                       "dpjob_rank": "__meta_kubernetes_pod_label_dpjob_io_rank",
                       "dpjob_restart": "__meta_kubernetes_pod_label_dpjob_io_restart"}
    podmonitor = (REPO / "helm/dpjob-operator/templates/podmonitor.yaml").read_text()
    for label in ("dpjob_job", "dpjob_rank", "dpjob_restart"):
        assert f"targetLabel: {label}" in podmonitor and f"[{targets[label]}]" in podmonitor
    assert jobs[promsupport.OPERATOR_JOB]["static_configs"] == [{"targets": ["127.0.0.1:8080"]}]
