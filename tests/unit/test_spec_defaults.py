"""The CRD's defaults and the typed model's agree, field by field: a job parsed as its author wrote
it (the model fills what is missing, api/spec.py) equals the same job parsed as the API server
stores it (the CRD's ``default:`` values filled in). The CRD is the one the chart installs
(crds/dataparalleljob.yaml is a link to it), so there is nothing else to keep in step."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dpjob_operator.api.spec import parse_job
from tests.support.crd import crd_schema

pytestmark = pytest.mark.unit


def schema() -> dict[str, Any]:
    return crd_schema()


def apply_defaults(obj: Any, node: dict[str, Any]) -> Any:
    """The API server's structural defaulting: a missing property with a ``default`` gets it, then
    defaulting goes on inside what is there (a defaulted ``{}`` gets its own fields' defaults)."""
    if isinstance(obj, dict):
        for key, prop in (node.get("properties") or {}).items():
            if key not in obj and "default" in prop:
                obj[key] = copy.deepcopy(prop["default"])
            if key in obj:
                obj[key] = apply_defaults(obj[key], prop)
    elif isinstance(obj, list) and "items" in node:
        return [apply_defaults(item, node["items"]) for item in obj]
    return obj


def defaults_in(node: dict[str, Any], path: str = "") -> list[str]:
    found = [path] if "default" in node else []
    for key, prop in (node.get("properties") or {}).items():
        found += defaults_in(prop, f"{path}.{key}" if path else key)
    if "items" in node:
        found += defaults_in(node["items"], f"{path}[]")
    return found


def job(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "dpjob.io/v1alpha1", "kind": "DataParallelJob",
            "metadata": {"name": "train", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "img"}]}}, **spec}}


@pytest.mark.parametrize("spec", [
    {},
    {"accelerator": "gpu", "procsPerReplica": 8},
    {"accelerator": "npu", "replicas": 2, "procsPerReplica": 8},
    {"framework": "mindspore"},
    {"framework": "oneflow", "accelerator": "gpu"},
    # every optional object present and empty: each of its fields comes from a default
    {"rendezvous": {}, "rankTable": {}, "runPolicy": {}, "placement": {}},
    {"rendezvous": {"mode": "elastic", "minReplicas": 1, "maxReplicas": 4}},
], ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "minimal")
def test_the_model_fills_in_what_the_crd_would(spec):
    written = job(**copy.deepcopy(spec))
    stored = apply_defaults(copy.deepcopy(written), schema())
    assert parse_job(written) == parse_job(stored)


def test_every_crd_default_is_exercised_by_a_case_above():
    """A default added to the CRD lands in a spec object a case leaves empty."""
    objects = {"rendezvous", "rankTable", "runPolicy", "placement"}
    for path in defaults_in(schema()["properties"]["spec"]):
        top = path.split(".")[0]
        assert "." not in path or top in objects, f"spec.{path} has a default no case reaches: add a case"
