"""The dev cluster's own parts that need no cluster: its configuration files render to the YAML its
processes read, kubectl runs and fails one way, and the one wait says what it waited for."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from devcluster import kube, kwok_pools, manifests, pki
from devcluster.waits import TimedOut, wait_until

pytestmark = pytest.mark.unit

# Every template's placeholders, as the code fills them (devcluster/pki.py, devcluster/control_plane.py).
VALUES = {
    "kubeconfig.yaml": {"apiserver_port": 16443, "ca": "/s/run/pki/ca.crt", "token": "t0k"},
    "cert-kubeconfig.yaml": {"apiserver_port": 16443, "ca": "/s/run/pki/ca.crt", "cert": "/s/n/c.crt",
                             "key": "/s/n/c.key"},
    "kube-scheduler.yaml": {"kubeconfig": "/s/kubeconfig"},
}


def rendered(name: str) -> list[dict]:
    text = manifests.render(name, **VALUES[name]) if name in VALUES else manifests.text(name)
    return [d for d in yaml.safe_load_all(text) if d]


def test_every_manifest_renders_to_yaml_and_every_template_is_filled():
    names = sorted(p.name for p in manifests.DIR.glob("*.yaml"))
    assert names, "devcluster/manifests/ has no YAML"
    for name in names:
        assert rendered(name), f"{name} renders to no document"
        if name in VALUES:
            assert "${" not in manifests.render(name, **VALUES[name]), f"{name} kept a placeholder"


@pytest.mark.parametrize("name", sorted(VALUES))
def test_a_template_missing_a_value_fails_instead_of_writing_half_a_file(name):
    values = dict(VALUES[name])
    values.popitem()
    with pytest.raises(KeyError):
        manifests.render(name, **values)


def test_the_admin_kubeconfig_points_kubectl_at_the_api_server_with_the_token():
    config = rendered("kubeconfig.yaml")[0]
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    user = next(u for u in config["users"] if u["name"] == context["user"])["user"]
    assert cluster == {"server": "https://127.0.0.1:16443", "certificate-authority": "/s/run/pki/ca.crt"}
    assert user == {"token": "t0k"}
    assert context["namespace"] == "default"


def test_a_node_kubeconfig_authenticates_with_its_client_certificate(tmp_path: Path):
    path = pki.cert_kubeconfig(tmp_path / "kubelet.kubeconfig", Path("/n/c.crt"), Path("/n/c.key"))
    config = yaml.safe_load(path.read_text())
    assert config["users"][0]["user"] == {"client-certificate": "/n/c.crt", "client-key": "/n/c.key"}
    assert config["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
    assert config["current-context"] == config["contexts"][0]["name"]
    assert path.stat().st_mode & 0o777 == 0o600  # holds a private key's path and is the node's identity


def test_the_scheduler_reads_the_admin_kubeconfig_without_leader_election():
    config = rendered("kube-scheduler.yaml")[0]
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["clientConnection"]["kubeconfig"] == "/s/kubeconfig"
    assert config["leaderElection"] == {"leaderElect": False}


def test_the_audit_policy_logs_pod_creates_deletes_and_bindings():
    policy = rendered("audit-policy.yaml")[0]
    assert policy["kind"] == "Policy"
    assert policy["rules"][0]["resources"] == [{"group": "", "resources": ["pods", "pods/binding"]}]
    assert policy["rules"][-1] == {"level": "None"}


def test_kwok_gets_its_configuration_its_own_stages_and_ours_in_one_file(tmp_path: Path, monkeypatch):
    stage_dir = tmp_path / "kwok-stage"
    for rel in kwok_pools.KWOK_STAGE_FILES:
        (stage_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage_dir / rel).write_text(f"apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {rel}}}\n")
    monkeypatch.setattr(kwok_pools, "RUN", tmp_path)
    docs = list(yaml.safe_load_all(kwok_pools.write_kwok_config(stage_dir).read_text()))
    assert docs[0]["kind"] == "KwokConfiguration"
    assert [d["metadata"]["name"] for d in docs[1:]] == [*kwok_pools.KWOK_STAGE_FILES, "dpjob-sim-complete",
                                                         "dpjob-sim-fail"]
    # tests/support/kwok.py and docs/devcluster.md drive these stages by annotation.
    selectors = {d["metadata"]["name"]: [e["key"] for e in d["spec"]["selector"]["matchExpressions"]]
                 for d in docs[-2:]}
    assert '.metadata.annotations["sim.dpjob.io/complete-after"]' in selectors["dpjob-sim-complete"]
    assert '.metadata.annotations["sim.dpjob.io/fail-after"]' in selectors["dpjob-sim-fail"]
    assert "sim.dpjob.io/exit-code" in docs[-1]["spec"]["next"]["statusTemplate"]


def test_kubectl_runs_the_cluster_binary_with_the_kubeconfig_first():
    out = kube.kubectl("get", "pods", binary=Path("/bin/echo"), kubeconfig=Path("/k/config"))
    assert out.stdout == "--kubeconfig /k/config get pods\n"


def test_a_failed_kubectl_says_which_command_failed_and_is_caught_as_either_error():
    with pytest.raises(RuntimeError, match=r"^kubectl get pods failed: ") as caught:
        kube.kubectl("get", "pods", binary=Path("/bin/false"), kubeconfig=Path("/k/config"))
    assert isinstance(caught.value, subprocess.CalledProcessError) and caught.value.returncode == 1
    assert kube.kubectl("get", "pods", binary=Path("/bin/false"), check=False).returncode == 1


def test_wait_until_returns_the_first_truthy_value():
    values = iter([None, 0, [], {"phase": "Running"}])
    assert wait_until(lambda: next(values), 5, 0, what="a status") == {"phase": "Running"}


def test_a_wait_that_times_out_is_an_assertion_naming_what_it_waited_for_and_the_last_value():
    with pytest.raises(AssertionError, match=r"waiting for 3 Running pods; last value: \[\]") as caught:
        wait_until(lambda: [], 0.01, 0.001, what="3 Running pods")
    assert isinstance(caught.value, TimedOut)


def test_a_wait_retries_only_the_exceptions_it_is_told_are_not_yet():
    attempts = iter([ConnectionRefusedError(), ConnectionRefusedError(), "ready"])

    def check() -> str:
        value = next(attempts)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_until(check, 5, 0, what="the server", retry_on=(OSError,)) == "ready"
    with pytest.raises(ZeroDivisionError):  # a check that cannot run is not "not yet"
        wait_until(lambda: 1 / 0, 5, 0, what="anything")
