"""What gets published where (devcluster/publish.py, devcluster/registry.py): every image a user can
be told to run exists under that name, one version runs through the package, the chart and the
tags, and the nodes reach the dev registry and its mirror."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from devcluster import publish, registry
from dpjob_cli.manifest import DEFAULT_IMAGES

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "dpjob-operator"
# Images a user is told to run that cannot be built on a public machine, and why.
NOT_BUILT_HERE = {"ghcr.io/dpjob/trainer:npu": "Ascend CANN base images are not public"}


def published_names(version: str) -> set[str]:
    names = set()
    for image in publish.PRODUCT_IMAGES:
        pub = publish.publication(image, version, "dev-0123456789ab")
        names |= {f"{registry.PUBLIC_REPOSITORY}/{pub.repository}:{tag}" for tag in pub.tags}
    return names


def example_images() -> dict[str, list[str]]:
    images = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        pod = doc["spec"]["template"]["spec"]
        images[path.name] = [c["image"] for c in pod.get("containers", []) + pod.get("initContainers", [])]
    return images


def is_template(path: Path) -> bool:
    return path.read_text().startswith("# Template:")


def test_one_version_runs_through_the_package_the_chart_and_the_image_tags():
    version = publish.source_version()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version, \
        "set pyproject.toml's version, Chart.yaml's version and appVersion to the same value"
    assert publish.publication("operator", version, "x").tags[0] == version
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == f"{registry.PUBLIC_REPOSITORY}/dpjob-operator"
    assert not values["image"].get("tag"), "an empty tag makes the chart run its appVersion"


@pytest.mark.parametrize("name", sorted(example_images()))
def test_every_example_names_a_published_image_or_says_it_is_a_template(name):
    path = REPO / "examples" / name
    unknown = [i for i in example_images()[name] if i not in published_names(publish.source_version())]
    if unknown:
        assert is_template(path), (f"{name} runs {unknown}, which `make images` does not build: build it, or start "
                                   "the file with '# Template:' and say what the image needs")
        text = path.read_text().split("\n\n")[0]
        assert "image" in text.lower(), f"{name}'s template header must say what the image needs"


def test_the_cli_defaults_are_published_or_documented_as_not_buildable_here():
    published = published_names(publish.source_version())
    for accelerator, image in DEFAULT_IMAGES.items():
        assert image in published or image in NOT_BUILT_HERE, (accelerator, image)


@pytest.mark.parametrize(("name", "local_ref", "tag"), [
    ("trainer", "localhost/dpjob/trainer:dev-0123456789ab", "dev-trainer-0123456789ab"),
    ("trainer-mindspore", "localhost/dpjob/trainer-mindspore:dev-ba9876543210", "dev-trainer-mindspore-ba9876543210"),
    ("coredns", "localhost/dpjob/coredns:1.15.0-0123456789ab", "1.15.0-0123456789ab"),
])
def test_dev_tags_are_immutable_and_never_collide_between_images_of_one_repository(name, local_ref, tag):
    assert publish.dev_tag(name, local_ref) == tag


def test_the_trainer_image_is_also_the_cuda_image():
    """PyPI's Linux torch wheel carries CUDA: one build, both names (no image that nothing builds)."""
    tags = publish.publication("trainer", "1.2.3", "x").tags
    assert {"cpu", "cuda", "1.2.3"} <= set(tags)
    assert publish.publication("trainer-mindspore", "1.2.3", "x").repository == "trainer"


def test_nodes_pull_from_the_dev_registry_over_http_and_mirror_the_public_host_to_it():
    hosts = registry.node_hosts(5000)
    assert hosts["localhost:5000"].startswith('server = "http://localhost:5000"')
    mirror = hosts["ghcr.io"]
    assert mirror.startswith('server = "https://ghcr.io"')  # the fallback when the mirror fails
    assert re.search(r'\[host\."http://localhost:5000"\]\s+capabilities = \["pull", "resolve"\]', mirror)


def test_the_registry_listens_on_loopback_only_and_allows_deletes():
    cfg = yaml.safe_load(registry.config(Path("/cache/registry"), 5001))
    assert cfg["http"]["addr"] == "127.0.0.1:5001"
    assert cfg["storage"]["filesystem"]["rootdirectory"] == "/cache/registry"
    assert cfg["storage"]["delete"]["enabled"] is True


@pytest.mark.parametrize(("ref", "parts"), [
    ("localhost:5000/dpjob/trainer:cpu", ("localhost:5000", "dpjob/trainer", "cpu")),
    ("ghcr.io/dpjob/dpjob-operator:0.1.0", ("ghcr.io", "dpjob/dpjob-operator", "0.1.0")),
])
def test_split_reference(ref, parts):
    assert registry.split_reference(ref) == parts


def test_a_release_of_another_version_than_the_source_is_refused(capsys):
    with pytest.raises(SystemExit, match=r"set the version in pyproject\.toml"):
        publish.main(["release", "--version", "99.0.0", "--registry", "localhost:1/x", "--helm", "/bin/false"])
