"""The chart's DataParallelJob CRD: a template that renders the repository's one CRD file, so
`helm upgrade` upgrades it; `crds.install` and `crds.keep`; and the chart as a subchart of an
umbrella chart, which hands it Helm's `global` values (tests/integration/test_helm_crds.py
installs both on the real API server)."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, CRD, KUBE_VERSION, by_kind, helm, helm_binary, render, template, umbrella_chart

pytestmark = [pytest.mark.unit, pytest.mark.skipif(
    helm_binary() is None and not os.environ.get("CI"),
    reason="no helm binary (devcluster/build.sh builds one); under CI=true the tests fail instead")]

CHART_CRD = CHART / "files" / "dataparalleljob.yaml"
SOURCE = "# Source: dpjob-operator/templates/crds.yaml\n"
KEEP = {"helm.sh/resource-policy": "keep"}


def _file_crd(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(CRD.read_text())
    if annotations:
        crd["metadata"]["annotations"] = annotations
    return crd


def test_the_chart_carries_the_only_copy_of_the_crd():
    """A real file in the chart (Helm warns about a symlink on every render) that the repository's
    crds/ links to, for `kubectl apply -f crds/`; and no chart crds/ folder, which Helm would install
    once outside the release and then refuse to replace with the template."""
    assert CHART_CRD.is_file() and not CHART_CRD.is_symlink()
    assert CRD.is_symlink() and CRD.resolve() == CHART_CRD.resolve()
    assert not (CHART / "crds").exists()


def test_the_rendered_crd_is_the_file_with_the_keep_annotation():
    (crd,) = by_kind(render(), "CustomResourceDefinition")
    assert crd == _file_crd(KEEP)
    # Text too (comments, order): the file, plus the two lines of the annotation.
    out = template().stdout
    rendered = out[out.index(SOURCE) + len(SOURCE):].split("\n---\n")[0]
    annotation = "  annotations:\n    helm.sh/resource-policy: keep\n"
    assert rendered.replace(annotation, "", 1).strip() == CRD.read_text().strip()


def test_without_keep_the_crd_is_rendered_exactly_as_the_file():
    (crd,) = by_kind(render(set_=["crds.keep=false"]), "CustomResourceDefinition")
    assert crd == _file_crd()


def test_crds_install_false_renders_no_crd_and_the_rest_of_the_chart():
    objs = render(set_=["crds.install=false"])
    assert by_kind(objs, "CustomResourceDefinition") == []
    assert [d["metadata"]["name"] for d in by_kind(objs, "Deployment")] == ["dpjob-dpjob-operator"]


@pytest.mark.parametrize(("setting", "error"), [("crds.instal=false", "additional properties 'instal' not allowed"),
                                                ("crds.keep=maybe", "at '/crds/keep': got string, want boolean")])
def test_a_misspelt_crds_value_fails_the_render(setting: str, error: str):
    proc = template(set_=[setting], check=False)
    assert proc.returncode != 0 and error in proc.stderr, proc.stderr


def test_helm_packages_the_crd_file_without_a_symlink_warning(tmp_path: Path):
    assert "symbolic link" not in template().stderr
    helm("package", str(CHART), "--destination", str(tmp_path))
    (tgz,) = tmp_path.glob("dpjob-operator-*.tgz")
    with tarfile.open(tgz) as tar:
        member = tar.getmember("dpjob-operator/files/dataparalleljob.yaml")
        assert member.isfile()
        assert tar.extractfile(member).read() == CRD.read_bytes()  # type: ignore[union-attr]
        assert not [n for n in tar.getnames() if n.startswith("dpjob-operator/crds/")]


def _render_umbrella(root: Path, *settings: str) -> list[dict[str, Any]]:
    args = ["template", "platform", str(root), "--namespace", "dpjob-system", "--kube-version", KUBE_VERSION]
    for s in settings:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def test_as_a_subchart_with_global_values_the_operator_and_the_crd_render(tmp_path: Path):
    """Helm hands an umbrella chart's `global` to every subchart: the schema must accept it."""
    root = umbrella_chart(tmp_path)
    objs = _render_umbrella(root, "global.imageRegistry=registry.example.com",
                            "dpjob-operator.logLevel=DEBUG")
    (deployment,) = by_kind(objs, "Deployment")
    assert deployment["metadata"]["name"] == "platform-dpjob-operator"
    assert by_kind(objs, "CustomResourceDefinition") == [_file_crd(KEEP)]
    assert "platform-dpjob-operator" in {r["metadata"]["name"] for r in by_kind(objs, "ClusterRole")}
    (config,) = [c for c in by_kind(objs, "ConfigMap") if c["metadata"]["name"] == "platform-dpjob-operator-config"]
    assert json.loads(config["data"]["config.json"])["logLevel"] == "DEBUG"
    # The umbrella's values reach the subchart, crds.install included.
    objs = _render_umbrella(root, "global.imageRegistry=registry.example.com", "dpjob-operator.crds.install=false")
    assert by_kind(objs, "CustomResourceDefinition") == [] and by_kind(objs, "Deployment")


def test_global_must_be_an_object():
    proc = template(set_=["global=oops"], check=False)
    assert proc.returncode != 0 and "global" in proc.stderr, proc.stderr
