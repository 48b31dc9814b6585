"""Panels that show one value per series, the last one in the window (Grafana's ``lastNotNull``):
the stat panel (a big number in its threshold colour, a sparkline under it) and the bar gauge."""

from __future__ import annotations

from collections.abc import Sequence

from devcluster.dashboard_render import svg
from devcluster.dashboard_render.model import Panel, Series
from devcluster.dashboard_render.scale import Range, value_range
from devcluster.dashboard_render.units import format_value


def last_value(series: Series, window: Range) -> float | None:
    """The last sample inside the window, or None."""
    inside = [v for t, v in series.points if window.lo <= t <= window.hi]
    return inside[-1] if inside else None


def threshold_colour(panel: Panel, value: float) -> str:
    """The colour of the highest threshold step at or below ``value`` (green without steps)."""
    chosen = "green"
    for start, name in panel.thresholds:
        if start is None or value >= start:
            chosen = name
    return svg.color(chosen)


def sparkline(cell: svg.Box, series: Series, window: Range, colour: str) -> list[str]:
    """The series as a filled area along the bottom third of the cell."""
    points = [(t, v) for t, v in series.points if window.lo <= t <= window.hi]
    if len(points) < 2:
        return []
    values = value_range([v for _, v in points])
    area = cell.inset(0.0, cell.h * 2 / 3, 0.0, 0.0)
    coords = [(area.x + window.fraction(t) * area.w, area.bottom - values.fraction(v) * area.h) for t, v in points]
    closed = [*coords, (coords[-1][0], area.bottom), (coords[0][0], area.bottom)]
    return [svg.polyline(closed, "none", width=0.0, fill=colour, opacity=0.15), svg.polyline(coords, colour, 1.0)]


def stat_cell(panel: Panel, cell: svg.Box, series: Series, value: float, named: bool, window: Range) -> list[str]:
    """One series' value, centred in its cell, its legend above it when there are several."""
    colour = threshold_colour(panel, value)
    big = series.legend if panel.text_mode == "name" else format_value(value, panel.unit, panel.decimals)
    parts = sparkline(cell, series, window, colour) if panel.graph_mode == "area" else []
    size = max(10.0, min(cell.h * 0.45, cell.w / (max(1, len(big)) * 0.6), 48.0))
    middle = cell.y + cell.h / 2
    if named and panel.text_mode != "name":
        parts.append(svg.text(cell.x + cell.w / 2, middle - size / 2 - 4.0, svg.clip(series.legend, cell.w, 12.0),
                              size=12.0, anchor="middle"))
    parts.append(svg.text(cell.x + cell.w / 2, middle + size / 2.8 + (6.0 if named else 0.0), big, size=size,
                          fill=colour, anchor="middle", weight="500"))
    return parts


def render_stat(panel: Panel, series: Sequence[Series], box: svg.Box, window: Range) -> list[str]:
    """A stat panel: one cell per series with a value, side by side."""
    shown = [(s, v) for s in series if (v := last_value(s, window)) is not None]
    if not shown:
        return svg.no_data(box, panel.title)
    parts, content = svg.frame(box, panel.title)
    width = content.w / len(shown)
    for index, (one, value) in enumerate(shown):
        cell = svg.Box(content.x + index * width, content.y, width, content.h)
        parts += stat_cell(panel, cell, one, value, len(shown) > 1, window)
    return parts


def render_bargauge(panel: Panel, series: Sequence[Series], box: svg.Box, window: Range) -> list[str]:
    """A horizontal bar gauge: per series its name, a bar scaled to the largest value, the value."""
    shown = [(s, v) for s in series if (v := last_value(s, window)) is not None]
    if not shown:
        return svg.no_data(box, panel.title)
    parts, content = svg.frame(box, panel.title)
    top = panel.max if panel.max is not None else max(max(v for _, v in shown), 1e-12)
    row = min(content.h / len(shown), 40.0)
    for index, (one, value) in enumerate(shown):
        y = content.y + index * row
        label = format_value(value, panel.unit, panel.decimals)
        colour = threshold_colour(panel, value)
        bar = svg.Box(content.x, y + 14.0, content.w - svg.text_width(label, 12.0) - 8.0, max(2.0, row - 18.0))
        parts.append(svg.text(content.x, y + 11.0, svg.clip(one.legend, content.w, 11.0), size=11.0))
        parts.append(svg.rect(bar, "#22252b"))
        parts.append(svg.rect(svg.Box(bar.x, bar.y, bar.w * min(1.0, max(0.0, value / top)), bar.h), colour))
        parts.append(svg.text(content.right, bar.y + bar.h / 2 + 4.0, label, size=12.0, fill=colour, anchor="end"))
    return parts
