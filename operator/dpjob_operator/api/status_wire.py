"""The wire form of the status objects (api/status.py): camelCase keys derived from the field names,
tolerant parsing (unknown keys, nulls and values of the wrong shape are dropped), and dumping."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self, Union


def wire_name(field_name: str) -> str:
    """``ready_replicas`` -> ``readyReplicas``."""
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class WireField:
    """How one field of a status object is read and written."""

    name: str           # the Python attribute
    wire: str           # the camelCase key
    kind: type          # str, int, float, bool, dict (a map), tuple (a list) or a StatusObject subclass
    item: type | None   # a list's item type


class StatusObject:
    """Wire conversion shared by the status dataclasses (subclasses must be dataclasses)."""

    @classmethod
    def wire_fields(cls) -> tuple[WireField, ...]:
        return _wire_fields(cls)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse the wire form; unknown keys, nulls and values of the wrong shape are dropped."""
        values: dict[str, Any] = {}
        if isinstance(data, Mapping):
            for f in cls.wire_fields():
                value = _parse(f, data.get(f.wire))
                if value is not None:
                    values[f.name] = value
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset (None) fields omitted, lists for tuples."""
        out: dict[str, Any] = {}
        for f in self.wire_fields():
            value = getattr(self, f.name)
            if value is not None:
                out[f.wire] = _dump(value)
        return out


def _unwrap_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


_FIELDS: dict[type, tuple[WireField, ...]] = {}


def _wire_fields(cls: type) -> tuple[WireField, ...]:
    if cls not in _FIELDS:
        _FIELDS[cls] = _read_fields(cls)
    return _FIELDS[cls]


def _read_fields(cls: type) -> tuple[WireField, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = _unwrap_optional(hints[f.name])
        origin = typing.get_origin(hint)
        if origin is tuple:
            out.append(WireField(f.name, wire_name(f.name), tuple, typing.get_args(hint)[0]))
        elif origin is not None:  # Mapping[str, int]
            out.append(WireField(f.name, wire_name(f.name), dict, typing.get_args(hint)[1]))
        else:
            out.append(WireField(f.name, wire_name(f.name), hint, None))
    return tuple(out)


def _parse_one(kind: type, value: Any) -> Any:
    if isinstance(kind, type) and issubclass(kind, StatusObject):
        return kind.from_dict(value) if isinstance(value, Mapping) else None
    if kind is float:
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return value if isinstance(value, kind) else None


def _parse(f: WireField, value: Any) -> Any:
    if f.kind is tuple:
        if not isinstance(value, list):
            return None
        assert f.item is not None
        return tuple(item for item in (_parse_one(f.item, v) for v in value) if item is not None)
    if f.kind is dict:
        if not isinstance(value, Mapping):
            return None
        assert f.item is not None
        return {k: v for k, v in value.items() if _parse_one(f.item, v) is not None}
    return _parse_one(f.kind, value)


def _dump(value: Any) -> Any:
    if isinstance(value, StatusObject):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value
