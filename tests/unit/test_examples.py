"""The examples say what they show and how to run them, and run as shipped: every field and enum
value is one the CRD's schema accepts (a typo would be refused at `kubectl apply`), the storage a
job's claim needs is in the repository and named in its header, GPU pods get a memory-backed
/dev/shm, and a volume the trainer writes is writable by its uid. No cluster."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dpjob_operator.api.spec import parse_job
from tests.support.paths import EXAMPLES, REPO, example_files

pytestmark = pytest.mark.unit

CRD = REPO / "crds" / "dataparalleljob.yaml"
TRAINER_UID = 10001  # trainer-image/Dockerfile's USER; docs/trainer.md, "Container image"
STORAGE_REF = re.compile(r"examples/storage/[\w.-]+\.yaml")
TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
                                      "integer": (int,), "number": (int, float)}


def schema() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return spec


def violations(value: Any, node: dict[str, Any], path: str) -> Iterator[str]:
    """What the API server's structural schema would refuse (types, unknown fields, enums, bounds,
    required fields); CEL rules are left to the integration tests' server-side dry run."""
    kind = node.get("type")
    if kind and (not isinstance(value, TYPES[kind]) or (kind in ("integer", "number") and isinstance(value, bool))):
        yield f"{path}: {value!r} is not {kind}"
        return
    if "enum" in node and value not in node["enum"]:
        yield f"{path}: {value!r} is not one of {node['enum']}"
    if "minimum" in node and value < node["minimum"]:
        yield f"{path}: {value} < {node['minimum']}"
    if "maximum" in node and value > node["maximum"]:
        yield f"{path}: {value} > {node['maximum']}"
    if isinstance(value, dict):
        yield from (f"{path}.{key}: required" for key in node.get("required", []) if key not in value)
        props = node.get("properties") or {}
        for key, sub in value.items():
            if key in props:
                yield from violations(sub, props[key], f"{path}.{key}")
            elif "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
                yield from violations(sub, node["additionalProperties"], f"{path}.{key}")
            elif not node.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{path}.{key}: unknown field"
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            yield from violations(item, node["items"], f"{path}[{i}]")


def header(path: Path) -> str:
    """The comment block the file starts with."""
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines[:next(i for i, x in enumerate(lines) if not x.startswith("#"))])


def pod_spec(path: Path) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(path.read_text())["spec"]["template"]["spec"]
    return spec


def claims(path: Path) -> set[str]:
    return {v["persistentVolumeClaim"]["claimName"] for v in pod_spec(path).get("volumes", [])
            if "persistentVolumeClaim" in v}


def storage_claims(ref: str) -> set[str]:
    return {d["metadata"]["name"] for d in yaml.safe_load_all((REPO / ref).read_text())
            if d and d["kind"] == "PersistentVolumeClaim"}


def test_the_examples_cover_what_users_look_for():
    names = {p.name for p in example_files()}
    assert {"quickstart-cpu.yaml", "checkpoint-pvc.yaml", "gpu-ddp.yaml", "stall-watchdog-cpu.yaml",
            "allranks-hostfile-cpu.yaml"} <= names
    assert (EXAMPLES / "storage" / "checkpoints-dev.yaml").exists()


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_every_field_and_enum_value_is_one_the_crd_accepts(path):
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == "dpjob.io/v1alpha1" and doc["kind"] == "DataParallelJob"
    found = list(violations(doc["spec"], schema()["properties"]["spec"], "spec"))
    assert not found, f"{path.name}: {found}"
    parse_job(doc)  # the operator's own model takes it as written (SpecError names the field otherwise)


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_every_example_says_what_it_shows_and_how_to_run_it(path):
    text = header(path)
    assert len(text.splitlines()) >= 2, f"{path.name}: start with comments saying what it shows and how to run it"
    assert re.search(rf"kubectl apply -n \S+ -f examples/{re.escape(path.name)}\b", text), \
        f"{path.name}: its header must show the `kubectl apply -n NS -f examples/{path.name}` that runs it"


def test_the_schema_check_refuses_what_the_api_server_refuses():
    spec, template = schema()["properties"]["spec"], {"spec": {"containers": []}}
    assert [v.split(" is not one of")[0] for v in violations({"accelerator": "tpu", "template": template}, spec,
                                                              "spec")] == ["spec.accelerator: 'tpu'"]
    assert list(violations({"replicaz": 2, "template": template}, spec, "spec")) == ["spec.replicaz: unknown field"]
    assert list(violations({"replicas": "2", "template": template}, spec, "spec")) == \
        ["spec.replicas: '2' is not integer"]
    assert list(violations({"replicas": 0}, spec, "spec")) == ["spec.template: required", "spec.replicas: 0 < 1"]


@pytest.mark.parametrize("path", [p for p in example_files() if claims(p)], ids=lambda p: p.name)
def test_the_storage_a_claim_needs_is_named_in_the_header_and_provides_it(path):
    refs = STORAGE_REF.findall(header(path))
    assert refs, f"{path.name} mounts {claims(path)}: name the examples/storage/ file that provides it"
    provided = set().union(*(storage_claims(ref) for ref in refs))
    assert claims(path) <= provided, f"{path.name} needs {claims(path)}; {refs} provide {provided}"


@pytest.mark.parametrize("path", [p for p in example_files() if claims(p)], ids=lambda p: p.name)
def test_a_volume_the_trainer_writes_is_writable_by_its_uid(path):
    security = pod_spec(path).get("securityContext") or {}
    assert security.get("fsGroup") == TRAINER_UID and security.get("runAsUser") == TRAINER_UID, \
        f"{path.name}: set securityContext runAsUser and fsGroup to {TRAINER_UID} (docs/trainer.md)"


@pytest.mark.parametrize("ref", sorted({str(p.relative_to(REPO)) for p in (EXAMPLES / "storage").glob("*.yaml")}))
def test_dev_storage_binds_its_claim_and_says_what_to_use_on_a_real_cluster(ref):
    docs = [d for d in yaml.safe_load_all((REPO / ref).read_text()) if d]
    volumes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PersistentVolume"}
    for claim in (d for d in docs if d["kind"] == "PersistentVolumeClaim"):
        pv = volumes[claim["spec"]["volumeName"]]
        assert claim["spec"]["accessModes"] == pv["spec"]["accessModes"] == ["ReadWriteMany"]
        assert claim["spec"]["storageClassName"] == pv["spec"]["storageClassName"]
    assert docs[0]["kind"] == "PersistentVolume", "the volume first: apply creates in file order"
    assert "ReadWriteMany storage class" in header(REPO / ref)


@pytest.mark.parametrize("path", [p for p in example_files()
                                  if yaml.safe_load(p.read_text())["spec"].get("accelerator") == "gpu"],
                         ids=lambda p: p.name)
def test_gpu_examples_give_dev_shm_a_memory_backed_volume(path):
    spec = pod_spec(path)
    memory = {v["name"] for v in spec.get("volumes", []) if (v.get("emptyDir") or {}).get("medium") == "Memory"}
    trainer = next(c for c in spec["containers"] if c["name"] == "trainer")
    assert any(m["mountPath"] == "/dev/shm" and m["name"] in memory for m in trainer.get("volumeMounts", [])), \
        f"{path.name}: NCCL needs more than the runtime's 64 MiB /dev/shm: mount an emptyDir (medium: Memory)"
