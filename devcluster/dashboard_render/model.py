"""What a picture is drawn from: a dashboard's panels as typed values read from its JSON, and the
series a panel's queries return (Prometheus' ``matrix`` result, parsed)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Grafana's legend template: ``{{label}}``, spaces inside the braces allowed.
_LEGEND_LABEL = re.compile(r"\{\{\s*(.+?)\s*\}\}")


@dataclass(frozen=True)
class GridPos:
    """A panel's place on Grafana's grid: 24 columns wide, ``h`` in rows of 30 px."""

    x: int
    y: int
    w: int
    h: int


@dataclass(frozen=True)
class Query:
    """One target of a panel: its PromQL as written (Grafana variables unexpanded) and legend."""

    ref_id: str
    expr: str
    legend_format: str


@dataclass(frozen=True)
class Panel:
    """A panel as the pictures need it; ``type`` is Grafana's (timeseries, stat, bargauge, row...)."""

    title: str
    type: str
    grid: GridPos
    unit: str = "short"
    queries: tuple[Query, ...] = ()
    min: float | None = None
    max: float | None = None
    decimals: int | None = None
    # Absolute threshold steps, lowest first: (from this value on, or None for the base, color name).
    thresholds: tuple[tuple[float | None, str], ...] = ()
    graph_mode: str = "none"  # stat: "area" draws a sparkline under the value
    text_mode: str = "auto"  # stat: "name" shows the series' legend instead of its value
    show_legend: bool = True


@dataclass(frozen=True)
class Dashboard:
    """A dashboard file: ``name`` is its file's stem, which also names its picture."""

    name: str
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Series:
    """One series of a query's result: its labels, its legend text and its (time, value) points."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]
    legend: str = ""
    ref_id: str = field(default="A")


def legend(legend_format: str, labels: Mapping[str, str]) -> str:
    """The legend Grafana shows for a series: ``{{label}}`` replaced by its value, and by the label's
    own name when the series has no such label (or an empty one), as Grafana does. An empty format
    shows the series as Prometheus writes it: ``name{label="value", ...}``."""
    if not legend_format:
        name = labels.get("__name__", "")
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return f"{name}{{{inner}}}" if inner or not name else name
    return _LEGEND_LABEL.sub(lambda m: labels.get(m.group(1)) or m.group(1), legend_format)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _walk(panels: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk(panel.get("panels") or [])  # a collapsed row holds its panels


def _thresholds(defaults: Mapping[str, Any]) -> tuple[tuple[float | None, str], ...]:
    steps = (defaults.get("thresholds") or {}).get("steps") or []
    return tuple((_number(step.get("value")), str(step.get("color", "green"))) for step in steps)


def panel_from_json(raw: Mapping[str, Any]) -> Panel:
    """One panel of a dashboard's JSON; a missing unit is Grafana's default, ``short``."""
    pos = raw.get("gridPos") or {}
    defaults = (raw.get("fieldConfig") or {}).get("defaults") or {}
    options = raw.get("options") or {}
    queries = tuple(Query(str(t.get("refId", "")), str(t["expr"]), str(t.get("legendFormat") or ""))
                    for t in raw.get("targets") or [] if t.get("expr"))
    decimals = defaults.get("decimals")
    return Panel(title=str(raw.get("title", "")), type=str(raw.get("type", "")),
                 grid=GridPos(int(pos.get("x", 0)), int(pos.get("y", 0)), int(pos.get("w", 24)), int(pos.get("h", 8))),
                 unit=str(defaults.get("unit") or "short"), queries=queries,
                 min=_number(defaults.get("min")), max=_number(defaults.get("max")),
                 decimals=None if decimals is None else int(decimals), thresholds=_thresholds(defaults),
                 graph_mode=str(options.get("graphMode", "none")), text_mode=str(options.get("textMode", "auto")),
                 show_legend=bool((options.get("legend") or {}).get("showLegend", True)))


def load_dashboard(path: str | Path) -> Dashboard:
    """A dashboard file's title and every panel, rows and the panels of collapsed rows included."""
    path = Path(path)
    raw = json.loads(path.read_text())
    panels = tuple(panel_from_json(p) for p in _walk(raw.get("panels") or []))
    return Dashboard(name=path.stem, title=str(raw.get("title", path.stem)), panels=panels)


def series_from_matrix(result: Sequence[Mapping[str, Any]], query: Query) -> list[Series]:
    """Prometheus' ``matrix`` result (``[{"metric": {...}, "values": [[t, "v"], ...]}]``) as series,
    with the query's legend; NaN and infinite samples are left out, as Grafana leaves a gap."""
    out = []
    for item in result:
        labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        points = tuple((float(t), float(v)) for t, v in item.get("values") or [] if math.isfinite(float(v)))
        out.append(Series(labels=labels, points=points, legend=legend(query.legend_format, labels),
                          ref_id=query.ref_id))
    return out
