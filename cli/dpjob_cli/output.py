"""``--output json|yaml|table``: one renderer for every command, so formats never drift apart.

json and yaml print the data itself (stable keys, for scripts); table is for people and is the
default. A command passes its data plus how to draw it as a table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml")


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a packed script) as readable ``|`` blocks instead of quoted one-liners."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(data: Any, fmt: str) -> str:
    """Serialise ``data`` as json or yaml (keys in the order built, not sorted)."""
    if fmt == "json":
        return json.dumps(data, indent=2, default=str)
    if fmt == "yaml":
        return str(yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)).rstrip("\n")
    raise ValueError(f"unknown output format {fmt!r}")


def dump_documents(docs: Sequence[Any], fmt: str) -> str:
    """Several objects: a JSON list, or a multi-document YAML stream (what ``kubectl apply -f`` takes)."""
    if fmt == "json":
        return json.dumps(list(docs), indent=2, default=str)
    return "\n---\n".join(dump(d, "yaml") for d in docs)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Left-aligned columns, two spaces apart, headers upper-case (kubectl's look). ``columns``: (key, header)."""
    cells = [[h.upper() for _, h in columns]]
    cells += [["-" if row.get(k) is None else str(row.get(k)) for k, _ in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def render(data: Any, fmt: str, as_table: Callable[[Any], str]) -> str:
    """``data`` in ``fmt``; ``as_table`` draws it for people."""
    return as_table(data) if fmt == "table" else dump(data, fmt)
