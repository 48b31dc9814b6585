"""Installing dpjob the way a user does, with no file of the source tree: ``make release`` pushes
the images and the chart to an OCI registry (the dev cluster's own), then ``helm install dpjob
oci://<registry>/charts/dpjob-operator --version V`` from an empty directory, with the image
repository pointing at that registry, runs the operator pod the kubelet pulled; the quickstart's
job, its image from the same registry, trains to Succeeded in containers. The install is
namespaced (``watchNamespaces``): a job elsewhere is left alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import publish, realnode, registry, stack
from tests.support import cluster as dpj
from tests.support.helm import helm, helm_binary, release_name
from tests.support.paths import KUBECONFIG, REPO

pytestmark = pytest.mark.e2e
VERSION = publish.source_version()
CHART = f"oci://{registry.DEV_REPOSITORY}/charts/dpjob-operator"


def quickstart_job(image: str) -> dict:
    """examples/quickstart-cpu.yaml as a user would type it, with the image from the registry."""
    return {"apiVersion": "dpjob.io/v1alpha1", "kind": "DataParallelJob", "metadata": {"name": "quickstart"},
            "spec": {"replicas": 2, "accelerator": "cpu",
                     "template": {"spec": {"containers": [{
                         "name": "trainer", "image": image,
                         "args": ["--task", "mlp", "--steps", "60", "--batch-size", "32"],
                         "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}}}]}}}}


@pytest.fixture(scope="module")
def released(cluster) -> None:
    """``make release VERSION=<source version> REGISTRY=<the dev registry>`` (the images a job and
    the chart need: the MindSpore image is released the same way and is not needed here)."""
    out = subprocess.run([sys.executable, str(REPO / "devcluster" / "publish.py"), "release", "--version", VERSION,
                          "--registry", registry.DEV_REPOSITORY, "--helm", str(helm_binary()),
                          "--images", "operator", "trainer"], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"{CHART}\n" in out.stdout, out.stdout


@pytest.fixture()
def only_this_install(_operator_process) -> Iterator[None]:
    """No other operator reconciles while the installed one runs (the shared process and the dev
    release are stopped; the next test's fixtures start them again)."""
    _operator_process.stop()
    stack.scale_operator(0)
    yield


def from_registry(image_id: str, ref: str) -> bool:
    """The container runs the manifest the registry serves for ``ref`` (the kubelet reports one of
    the image's repository digests: a node that also pulled it under its mirrored public name may
    name that one)."""
    digest = registry.manifest_digest(ref)
    return bool(digest) and image_id.endswith(f"@{digest}")


def install(tmp_path: Path, release: str, namespace: str, watched: str) -> None:
    values = {
        "image": {"repository": f"{registry.DEV_REPOSITORY}/dpjob-operator"},
        "watchNamespaces": [watched],
        "crds": {"install": False},  # the cluster already has the CRD (one owner per cluster)
        "nodeSelector": {"dpjob.io/pool": realnode.POOL}, "tolerations": [realnode.TOLERATION],
        "pools": {"cpu": {"deviceResource": None, "nodeSelector": {"dpjob.io/pool": realnode.POOL},
                          "tolerations": [realnode.TOLERATION], "env": {"OMP_NUM_THREADS": "1"}}},
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
    }
    args = ["install", release, CHART, "--version", VERSION, "--plain-http", "-n", namespace, "--create-namespace",
            "--wait", "--timeout", "180s"]
    for key, value in values.items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    proc = subprocess.run([str(helm_binary()), *args, "--kubeconfig", str(KUBECONFIG)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_user_installs_from_the_registry_and_the_quickstart_trains(
        api, core, namespace, tmp_path, released, only_this_install, request):
    # A release name of its own: the dev cluster's release `dpjob` owns the cluster-scoped objects
    # named after it (a second install in one cluster needs another name, docs/install.md).
    release, operator_ns = release_name(), f"{namespace}-system"
    request.addfinalizer(lambda: (helm("uninstall", release, "-n", operator_ns, "--wait", kubeconfig=KUBECONFIG,
                                       check=False), dpj.kubectl("delete", "namespace", operator_ns, "--wait=false",
                                                                 check=False)))
    install(tmp_path, release, operator_ns, watched=namespace)
    [pod] = core.list_namespaced_pod(operator_ns, label_selector=f"app.kubernetes.io/instance={release}").items
    operator_image = f"{registry.DEV_REPOSITORY}/dpjob-operator:{VERSION}"
    assert pod.spec.containers[0].image == operator_image
    assert from_registry(pod.status.container_statuses[0].image_id, operator_image)

    elsewhere = f"{namespace}-elsewhere"
    dpj.kubectl("create", "namespace", elsewhere)
    request.addfinalizer(lambda: dpj.kubectl("delete", "namespace", elsewhere, "--wait=false", check=False))
    image = f"{registry.DEV_REPOSITORY}/trainer:{VERSION}"
    dpj.create(api, elsewhere, quickstart_job(image))
    dpj.create(api, namespace, quickstart_job(image))
    st = dpj.wait_phase(api, namespace, "quickstart", "Succeeded", timeout=300)
    assert st["succeededReplicas"] == 2 and st["restarts"] == 0, st
    pods = dpj.rank_pods(core, namespace, "quickstart")
    assert {p.spec.node_name for p in pods} <= {n.name for n in stack.cluster.NODES}
    assert all(from_registry(p.status.container_statuses[0].image_id, image) for p in pods), \
        [p.status.container_statuses[0].image_id for p in pods]
    # The namespaced install never touched the job outside its namespace, all the while.
    assert not dpj.get(api, elsewhere, "quickstart").get("status"), "a namespaced install reconciled another namespace"
    assert not core.list_namespaced_pod(elsewhere).items
