"""The typed status (api/status.py) and the CRD's status schema describe the same object: every field
of the model is in the schema with a compatible type, and every field of the schema is in the model,
at every depth. A field added to one and not the other would be pruned by the API server on write
(the model's) or dropped on read (the schema's)."""

from __future__ import annotations

from typing import Any

import pytest

from dpjob_operator.api.status import JobStatus
from dpjob_operator.api.status_wire import StatusObject
from tests.support.crd import crd_schema

pytestmark = pytest.mark.unit
OPENAPI_TYPE = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", tuple: "array"}


def mismatches(model: type[StatusObject], node: dict[str, Any], path: str) -> list[str]:
    """What differs between ``model`` and the schema ``node`` of the object at ``path``."""
    if node.get("type") != "object":
        return [f"{path}: the schema says {node.get('type')}, the model an object"]
    props: dict[str, Any] = node.get("properties") or {}
    fields = {f.wire: f for f in model.wire_fields()}
    found = [f"{path}.{key}: in the CRD, not in {model.__name__}" for key in sorted(props.keys() - fields.keys())]
    found += [f"{path}.{key}: in {model.__name__}, not in the CRD" for key in sorted(fields.keys() - props.keys())]
    for key in sorted(fields.keys() & props.keys()):
        f, prop, where = fields[key], props[key], f"{path}.{key}"
        if isinstance(f.kind, type) and issubclass(f.kind, StatusObject):
            found += mismatches(f.kind, prop, where)
            continue
        if prop.get("type") != OPENAPI_TYPE[f.kind]:
            found.append(f"{where}: the schema says {prop.get('type')}, the model {f.kind.__name__}")
        elif f.kind is tuple and f.item is not None:
            found += item_mismatches(f.item, prop.get("items") or {}, f"{where}[]")
        elif f.kind is dict and f.item is not None:
            found += item_mismatches(f.item, prop.get("additionalProperties") or {}, f"{where}{{}}")
    return found


def item_mismatches(item: type, node: dict[str, Any], path: str) -> list[str]:
    if issubclass(item, StatusObject):
        return mismatches(item, node, path)
    return [] if node.get("type") == OPENAPI_TYPE[item] else [f"{path}: the schema says {node.get('type')}, "
                                                               f"the model {item.__name__}"]


def test_every_field_of_the_model_is_in_the_crd_status_schema_and_the_reverse() -> None:
    assert mismatches(JobStatus, crd_schema()["properties"]["status"], "status") == []


def test_the_comparison_finds_a_field_missing_on_either_side_and_a_wrong_type() -> None:
    schema = crd_schema()["properties"]["status"]
    schema["properties"]["efficiency"] = {"type": "number"}
    del schema["properties"]["gang"]["properties"]["minCount"]
    schema["properties"]["progress"]["properties"]["slowestRank"]["properties"]["rank"] = {"type": "string"}
    schema["properties"]["conditions"]["items"]["properties"]["severity"] = {"type": "string"}
    assert mismatches(JobStatus, schema, "status") == [
        "status.efficiency: in the CRD, not in JobStatus",
        "status.conditions[].severity: in the CRD, not in Condition",
        "status.gang.minCount: in Gang, not in the CRD",
        "status.progress.slowestRank.rank: the schema says string, the model int",
    ]
