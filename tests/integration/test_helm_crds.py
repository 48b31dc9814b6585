"""The chart's CRD on the real API server: `helm upgrade` upgrades the DataParallelJob CRD and
leaves every job alone, `helm uninstall` keeps the CRD and the jobs, and the chart installs as a
subchart of an umbrella release that passes Helm's `global` values.

The CRD is cluster-wide and shared with every other test: the test that changes it gets it back
as crds/ defines it (schema, and no Helm ownership) before it ends, whatever happened.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl
from tests.support.helm import CHART, CRD, fullname, helm, helm_binary, release_name, umbrella_chart
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(helm_binary() is None and not os.environ.get("CI"),
                                 reason="no helm binary (devcluster/build.sh builds one); "
                                        "under CI=true the tests fail instead")]

CRD_NAME = "dataparalleljobs.dpjob.io"
# What Helm writes on an object it owns; a release that is gone must leave none of it on the CRD.
HELM_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace", "helm.sh/resource-policy")
HELM_LABEL = "app.kubernetes.io/managed-by"
# The field the older CRD lacks: optional and without a default (a default would be filled into
# the existing job when it is read after the upgrade, which is a change the user did not make).
FIELD = "stragglerFactor"


def _crd_file() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return crd


def _older_chart(directory: Path) -> Path:
    """The chart as it was before ``spec.runPolicy.stragglerFactor``: its CRD lacks the field."""
    old = directory / "dpjob-operator"
    shutil.copytree(CHART, old)
    crd = _crd_file()
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        del spec["properties"]["runPolicy"]["properties"][FIELD]
    (old / "files" / "dataparalleljob.yaml").write_text(yaml.safe_dump(crd, sort_keys=False))
    return old


def _dry_run_with_field(namespace: str) -> tuple[bool, str]:
    """A server-side dry-run create of a job that sets the field, with strict field validation:
    (accepted with the field kept, the server's answer)."""
    body = JobBuilder("probe").run_policy(suspend=True, **{FIELD: 2.0}).obj()
    proc = kubectl("create", "--dry-run=server", "--validate=strict", "-n", namespace, "-o", "json", "-f", "-",
                   stdin=json.dumps(body), check=False)
    if proc.returncode != 0:
        return False, proc.stderr
    return json.loads(proc.stdout)["spec"]["runPolicy"].get(FIELD) == 2.0, proc.stdout


def _field_served(namespace: str) -> bool:
    return _dry_run_with_field(namespace)[0]


def _field_refused(namespace: str) -> bool:
    served, answer = _dry_run_with_field(namespace)
    return not served and "unknown field" in answer and FIELD in answer


def _live_crd() -> dict[str, Any]:
    live: dict[str, Any] = json.loads(kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    return live


def _restore_crd(namespace: str) -> None:
    """The CRD as crds/ defines it: no Helm ownership, the file's schema, served again."""
    from devcluster import stack

    unowned = {"metadata": {"annotations": dict.fromkeys(HELM_ANNOTATIONS), "labels": {HELM_LABEL: None}}}
    kubectl("patch", "crd", CRD_NAME, "--type=merge", "-p", json.dumps(unowned))
    stack.apply_crds()
    wait_until(lambda: _field_served(namespace), timeout=60, what=f"the API server to serve {FIELD} again")
    live = _live_crd()
    assert not set(HELM_ANNOTATIONS) & set(live["metadata"].get("annotations") or {})
    assert HELM_LABEL not in (live["metadata"].get("labels") or {})
    schemas = [v["schema"] for v in live["spec"]["versions"]]
    assert schemas == [v["schema"] for v in _crd_file()["spec"]["versions"]]


@pytest.fixture()
def shared_crd(cluster: Path, crds: None, namespace: str) -> Iterator[str]:
    """The test may take the cluster's CRD; it is restored afterwards. Yields the namespace."""
    try:
        yield namespace
    finally:
        _restore_crd(namespace)


def _serve_older_crd(namespace: str, chart: Path) -> None:
    """The cluster's CRD as the older chart defines it."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(chart / "files" / "dataparalleljob.yaml"))
    wait_until(lambda: _field_refused(namespace), timeout=60, what=f"the older CRD, without {FIELD}, to be served")


def _install(cluster: Path, namespace: str, chart: Path, *args: str) -> str:
    """A release of ``chart`` with no operator pod; returns its name."""
    release = release_name()
    notes = helm("install", release, str(chart), "-n", namespace, "--set", "replicaCount=0", "--timeout", "60s",
                 *args, kubeconfig=cluster).stdout
    assert "CRD dataparalleljobs.dpjob.io:" in notes
    return release


def _upgrade(cluster: Path, namespace: str, release: str, *args: str, check: bool = True) -> str:
    proc = helm("upgrade", release, str(CHART), "-n", namespace, "--set", "replicaCount=0", "--timeout", "60s",
                *args, kubeconfig=cluster, check=check)
    return proc.stderr


def _create_suspended(api: Any, namespace: str, name: str, **run_policy: Any) -> dict[str, Any]:
    # Suspended: an operator running elsewhere in the cluster creates no pods for it.
    return dpj.create(api, namespace, JobBuilder(name).run_policy(suspend=True, **run_policy).obj())


def _assert_served_and_untouched(api: Any, namespace: str, before: dict[str, Any]) -> None:
    """The upgraded CRD serves the field (a job keeps it), and the job created before is the same
    object with the same spec."""
    wait_until(lambda: _field_served(namespace), timeout=60, what=f"the upgraded CRD to serve {FIELD}")
    _create_suspended(api, namespace, "after", **{FIELD: 1.5})
    assert dpj.get(api, namespace, "after")["spec"]["runPolicy"][FIELD] == 1.5
    still = dpj.get(api, namespace, before["metadata"]["name"])
    assert still["metadata"]["uid"] == before["metadata"]["uid"]
    assert still["metadata"]["generation"] == before["metadata"]["generation"]
    assert still["spec"] == before["spec"]


def test_upgrade_serves_the_new_field_keeps_every_job_and_uninstall_keeps_the_crd(
        shared_crd: str, cluster: Path, api: Any, tmp_path: Path) -> None:
    namespace = shared_crd
    older = _older_chart(tmp_path)
    _serve_older_crd(namespace, older)
    # The CRD exists (the cluster's): Helm adopts it only when asked.
    release = _install(cluster, namespace, older, "--take-ownership")
    before = _create_suspended(api, namespace, "before", backoffLimit=2)

    _upgrade(cluster, namespace, release)
    _assert_served_and_untouched(api, namespace, before)
    assert _live_crd()["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    out = helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", kubeconfig=cluster).stdout
    assert f"[CustomResourceDefinition] {CRD_NAME}" in out, out  # Helm lists what it kept
    assert kubectl("get", "clusterrole", fullname(release), check=False).returncode != 0
    assert sorted(j["metadata"]["name"] for j in dpj.list_jobs(api, namespace)) == ["after", "before"]
    assert dpj.get(api, namespace, "before")["metadata"]["uid"] == before["metadata"]["uid"]
    assert dpj.get(api, namespace, "after")["spec"]["runPolicy"][FIELD] == 1.5


def test_a_release_whose_chart_did_not_own_the_crd_adopts_it_with_take_ownership(
        shared_crd: str, cluster: Path, api: Any, tmp_path: Path) -> None:
    """The upgrade from a chart that shipped the CRD in crds/ (installed once, owned by no release),
    as docs/helm.md tells it: a plain upgrade stops and names the CRD, --take-ownership adopts and
    upgrades it, and later upgrades need nothing more."""
    namespace = shared_crd
    older = _older_chart(tmp_path)
    _serve_older_crd(namespace, older)
    release = _install(cluster, namespace, older, "--set", "crds.install=false")
    before = _create_suspended(api, namespace, "before")

    refused = _upgrade(cluster, namespace, release, check=False)
    assert f'"{CRD_NAME}"' in refused and "exists and cannot be imported into the current release" in refused
    _upgrade(cluster, namespace, release, "--take-ownership")
    _assert_served_and_untouched(api, namespace, before)
    assert _live_crd()["metadata"]["annotations"]["meta.helm.sh/release-name"] == release
    _upgrade(cluster, namespace, release, "--set", "logLevel=DEBUG")
    helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", kubeconfig=cluster)
    assert dpj.get(api, namespace, "before")["metadata"]["uid"] == before["metadata"]["uid"]


def test_the_chart_installs_as_a_subchart_of_an_umbrella_release(cluster: Path, crds: None, namespace: str,
                                                                 tmp_path: Path) -> None:
    """An umbrella release passes `global` to the chart; the cluster's CRD belongs to no release,
    so the subchart is told not to render one."""
    root = umbrella_chart(tmp_path)
    release = release_name()
    name = fullname(release)
    helm("install", release, str(root), "-n", namespace, "--set", "global.imageRegistry=registry.example.com",
         "--set", "dpjob-operator.crds.install=false", "--set", "dpjob-operator.replicaCount=0",
         "--timeout", "60s", kubeconfig=cluster)
    try:
        deployment = json.loads(kubectl("get", "deployment", name, "-n", namespace, "-o", "json").stdout)
        assert deployment["spec"]["replicas"] == 0
        kubectl("get", "serviceaccount", name, "-n", namespace)
        kubectl("get", "clusterrole", name)
        kubectl("get", "clusterrolebinding", name)
        kubectl("get", "role", f"{name}-leader-election", "-n", namespace)
        kubectl("get", "rolebinding", f"{name}-leader-election", "-n", namespace)
        manifest = helm("get", "manifest", release, "-n", namespace, kubeconfig=cluster).stdout
        assert "kind: CustomResourceDefinition" not in manifest
    finally:
        helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", kubeconfig=cluster, check=False)
    assert kubectl("get", "clusterrole", name, check=False).returncode != 0
    assert CRD_NAME in kubectl("get", "crd", CRD_NAME, "-o", "name").stdout
