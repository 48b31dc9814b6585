"""`dpjob` against the real control plane: `explain` on every example (server-side dry run, the
operator's builders, the capacity of the cluster's nodes) creates nothing; invalid specs are named by
the CRD schema and CEL rules; an unknown job, a CRD that is not served, an unreachable API server and
rejected credentials each give one line and their exit code (docs/cli.md). No operator is needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dpjob_cli.errors import ExitCode
from dpjob_cli.main import main
from tests.support import cluster as dpj
from tests.support.paths import EXAMPLES, KUBECONFIG, REPO, example_files
from tests.support.ports import free_port
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


def dpjob(*args: str, kubeconfig: Path = KUBECONFIG) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: a process of this checkout's source, KUBECONFIG from the environment."""
    source = os.pathsep.join(str(REPO / p) for p in ("cli", "operator", "."))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": source}
    return subprocess.run([sys.executable, "-m", "dpjob_cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_explain_every_example_on_the_server_and_nothing_is_created(api, crds, namespace, path):
    text = dpjob("-n", namespace, "explain", "-f", str(path))
    assert text.returncode == 0, text.stderr
    assert "valid, checked by server-side dry run" in text.stdout and "No objects were created." in text.stdout
    assert "Capacity: fits now" in text.stdout or "Capacity: does NOT fit now" in text.stdout, text.stdout

    data = json.loads(dpjob("-n", namespace, "explain", "-f", str(path), "-o", "json").stdout)
    doc = yaml.safe_load(path.read_text())
    assert data["job"]["name"] == doc["metadata"]["name"] and data["job"]["namespace"] == namespace
    assert data["pods"][0]["name"] == f"{doc['metadata']['name']}-rank-0"
    assert data["capacity"]["known"] and data["capacity"]["eligibleNodes"] >= 1, data["capacity"]
    wait_until(lambda: dpj.list_jobs(api, namespace) == [], timeout=30, interval=0.5, what="the job taken back")


def test_explain_the_whole_examples_folder_at_once(crds, namespace):
    text = dpjob("-n", namespace, "explain", "-f", str(EXAMPLES))
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("No objects were created.") == len(example_files())


def test_explain_of_a_job_that_already_exists_still_validates_it(api, crds, namespace):
    dpj.create(api, namespace, yaml.safe_load((EXAMPLES / "quickstart-cpu.yaml").read_text()))
    text = dpjob("-n", namespace, "explain", "-f", str(EXAMPLES / "quickstart-cpu.yaml"))
    assert text.returncode == 0, text.stderr
    assert "a job named quickstart already exists; validated as a new job" in text.stdout
    assert [j["metadata"]["name"] for j in dpj.list_jobs(api, namespace)] == ["quickstart"]


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = doc["spec"]["template"]["spec"]["containers"]
    return containers


INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("replicas-zero", lambda d: d["spec"].update(replicas=0), "spec.replicas"),
    ("no-trainer", lambda d: _containers(d)[0].update(name="main"), "a container named 'trainer'"),
    ("nccl-on-cpu", lambda d: d["spec"].update(backend="nccl"), "spec.backend nccl needs spec.accelerator gpu"),
    ("elastic-without-bounds", lambda d: d["spec"].update(rendezvous={"mode": "elastic"}),
     "spec.rendezvous.minReplicas and spec.rendezvous.maxReplicas are required"),
    ("typo", lambda d: d["spec"].update(replicaz=2), "replicaz"),
    ("name-too-long", lambda d: d["metadata"].update(name="q" * 60), "metadata.name is too long"),
]


@pytest.mark.parametrize("mutate, field", [(m, f) for _, m, f in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_spec_is_refused_by_the_server_with_the_field_named(crds, namespace, tmp_path, mutate, field):
    doc = yaml.safe_load((EXAMPLES / "quickstart-cpu.yaml").read_text())
    mutate(doc)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    text = dpjob("-n", namespace, "explain", "-f", str(path))
    assert text.returncode == ExitCode.INVALID_SPEC, text.stdout + text.stderr
    lines = text.stderr.strip().splitlines()
    assert all(line.startswith("error: invalid spec: ") for line in lines) and "Traceback" not in text.stderr
    assert field in text.stderr


@pytest.mark.parametrize("command", [["status", "ghost"], ["logs", "ghost"], ["delete", "ghost"],
                                     ["wait", "ghost"]])
def test_unknown_job_is_exit_5_and_names_the_namespace(crds, namespace, command):
    text = dpjob("-n", namespace, *command)
    assert text.returncode == ExitCode.NOT_FOUND
    assert one_error_line(text) == (f"error: no DataParallelJob 'ghost' in namespace {namespace} (`dpjob list` "
                                    "shows the jobs there; -n selects another namespace)")


def test_list_of_an_empty_namespace(crds, namespace):
    text = dpjob("-n", namespace, "list")
    assert text.returncode == 0 and f"No DataParallelJobs in namespace {namespace}." in text.stderr


def test_a_crd_the_server_does_not_serve_gives_the_helm_hint(crds, namespace, monkeypatch, capsys):
    monkeypatch.setattr("dpjob_cli.kube.GROUP", "not-installed.dpjob.io")  # what a cluster without our CRD answers
    code = main(["--kubeconfig", str(KUBECONFIG), "-n", namespace, "list"])
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.CRD_MISSING and len(err.splitlines()) == 1
    assert "CRD (dataparalleljobs.dpjob.io) is not installed" in err
    assert "helm install dpjob oci://ghcr.io/dpjob/charts/dpjob-operator" in err


def _kubeconfig_copy(tmp_path: Path, server: str | None = None, token: str | None = None) -> Path:
    config = yaml.safe_load(KUBECONFIG.read_text())
    if server:
        config["clusters"][0]["cluster"]["server"] = server
    if token:
        config["users"][0]["user"] = {"token": token}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_no_cluster_access_names_the_server_and_the_kubeconfig(cluster, tmp_path):
    config = _kubeconfig_copy(tmp_path, server=f"https://127.0.0.1:{free_port()}")
    text = dpjob("list", kubeconfig=config)
    line = one_error_line(text)
    assert text.returncode == ExitCode.NO_CLUSTER and "no cluster access: cannot reach https://127.0.0.1:" in line
    assert f"kubeconfig: {config}" in line
    text = dpjob("explain", "-f", str(EXAMPLES / "quickstart-cpu.yaml"), kubeconfig=config)
    assert text.returncode == ExitCode.NO_CLUSTER and "--offline" in one_error_line(text)


def test_rejected_credentials_are_no_cluster_access(cluster, tmp_path):
    text = dpjob("list", kubeconfig=_kubeconfig_copy(tmp_path, token="not-a-token"))
    assert text.returncode == ExitCode.NO_CLUSTER and "(401 Unauthorized)" in one_error_line(text)


def test_a_script_configmap_the_cluster_refuses_takes_the_job_back(api, core, crds, namespace, tmp_path):
    """A quota refuses the script's ConfigMap: no half-made job is left behind, one line says why."""
    dpj.quota_full_of_configmaps(core, namespace, "no-more-configmaps")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    text = dpjob("-n", namespace, "run", str(script), "--name", "refused")
    assert text.returncode == ExitCode.API_ERROR, text.stderr
    assert "exceeded quota" in one_error_line(text)
    wait_until(lambda: dpj.list_jobs(api, namespace) == [], timeout=30, interval=0.5, what="the job taken back")
