"""The timeseries panel: value axis in the panel's unit, time axis in UTC, one polyline per series
(broken where samples are missing, as Grafana leaves gaps) and a legend below from legendFormat."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from devcluster.dashboard_render import svg
from devcluster.dashboard_render.model import Panel, Series
from devcluster.dashboard_render.scale import Range, ticks, time_label, time_ticks, value_range
from devcluster.dashboard_render.units import format_value

LEGEND_SIZE = 11.0
LEGEND_ROW = 16.0
AXIS_SIZE = 10.0
TIME_AXIS = 18.0


def legend(items: Sequence[tuple[str, str]], box: svg.Box, max_rows: int) -> tuple[list[str], float]:
    """Legend entries (text, colour) flowed left to right in rows at the bottom of ``box``; entries
    that do not fit in ``max_rows`` are counted in a last "+N more". Returns elements and height."""
    rows: list[list[tuple[str, str]]] = [[]]
    used = 0.0
    for index, (label, colour) in enumerate(items):
        width = 18.0 + svg.text_width(label, LEGEND_SIZE) + 12.0
        if rows[-1] and used + width > box.w:
            if len(rows) == max_rows:
                rows[-1][-1] = (f"+{len(items) - index + 1} more", svg.MUTED)
                break
            rows.append([])
            used = 0.0
        rows[-1].append((svg.clip(label, box.w - 30.0, LEGEND_SIZE), colour))
        used += width
    height = len(rows) * LEGEND_ROW if items else 0.0
    parts: list[str] = []
    for row_index, row in enumerate(rows):
        y = box.bottom - height + row_index * LEGEND_ROW + LEGEND_ROW / 2
        x = box.x
        for label, colour in row:
            parts.append(svg.line(x, y, x + 14.0, y, stroke=colour, width=3.0))
            parts.append(svg.text(x + 18.0, y + 4.0, label, size=LEGEND_SIZE))
            x += 18.0 + svg.text_width(label, LEGEND_SIZE) + 12.0
    return parts, height


def axes(plot: svg.Box, values: Range, window: Range, unit: str, tick_count: int) -> list[str]:
    """Horizontal grid lines with value labels on the left, vertical ones with times below."""
    parts = []
    for tick in ticks(values, tick_count):
        y = plot.bottom - values.fraction(tick) * plot.h
        parts.append(svg.line(plot.x, y, plot.right, y))
        parts.append(svg.text(plot.x - 4.0, y + 3.5, format_value(tick, unit), size=AXIS_SIZE, fill=svg.MUTED,
                              anchor="end"))
    for tick in time_ticks(window, max(2, int(plot.w / 80))):
        x = plot.x + window.fraction(tick) * plot.w
        label = time_label(tick, window)
        half = svg.text_width(label, AXIS_SIZE) / 2
        parts.append(svg.line(x, plot.y, x, plot.bottom))
        if plot.x <= x - half and x + half <= plot.right:  # a label past the plot's edge would meet the axis
            parts.append(svg.text(x, plot.bottom + 14.0, label, size=AXIS_SIZE, fill=svg.MUTED, anchor="middle"))
    return parts


def segments(points: Sequence[tuple[float, float]], window: Range) -> list[list[tuple[float, float]]]:
    """The points inside the window, split where a gap is longer than 2.5 sampling intervals."""
    inside = [(t, v) for t, v in points if window.lo <= t <= window.hi]
    steps = [b[0] - a[0] for a, b in pairwise(inside) if b[0] > a[0]]
    gap = 2.5 * min(steps) if steps else float("inf")
    out: list[list[tuple[float, float]]] = []
    for index, point in enumerate(inside):
        if index == 0 or point[0] - inside[index - 1][0] > gap:
            out.append([])
        out[-1].append(point)
    return out


def plot_series(plot: svg.Box, values: Range, window: Range, series: Series, colour: str) -> list[str]:
    """One series as polylines in ``plot``; a lone sample as a dot. Values outside the value range
    (a panel's fixed min or max) are drawn on its edge."""
    parts = []
    for segment in segments(series.points, window):
        coords = [(plot.x + window.fraction(t) * plot.w,
                   plot.bottom - min(1.0, max(0.0, values.fraction(v))) * plot.h) for t, v in segment]
        if len(coords) == 1:
            parts.append(svg.circle(coords[0][0], coords[0][1], 1.5, colour))
        else:
            parts.append(svg.polyline(coords, colour))
    return parts


def render(panel: Panel, series: Sequence[Series], box: svg.Box, window: Range) -> list[str]:
    """A timeseries panel; "No data" when no series has a sample in the window."""
    drawn = [s for s in series if any(window.lo <= t <= window.hi for t, _ in s.points)]
    if not drawn:
        return svg.no_data(box, panel.title)
    parts, content = svg.frame(box, panel.title)
    colours = [svg.PALETTE[i % len(svg.PALETTE)] for i in range(len(drawn))]
    legend_parts: list[str] = []
    legend_height = 0.0
    if panel.show_legend:
        legend_parts, legend_height = legend([(s.legend, c) for s, c in zip(drawn, colours, strict=True)], content,
                                             max_rows=max(1, min(3, int(content.h / 4 / LEGEND_ROW))))
    values = [v for s in drawn for t, v in s.points if window.lo <= t <= window.hi]
    tick_count = max(2, int((content.h - legend_height - TIME_AXIS) / 40))
    value_span = value_range(values, panel.min, panel.max, tick_count)
    labels = [format_value(t, panel.unit) for t in ticks(value_span, tick_count)]
    label_width = max(svg.text_width(label, AXIS_SIZE) for label in labels) + 6.0
    plot = content.inset(label_width, 4.0, 4.0, legend_height + TIME_AXIS + 2.0)
    parts += axes(plot, value_span, window, panel.unit, tick_count)
    for one, colour in zip(drawn, colours, strict=True):
        parts += plot_series(plot, value_span, window, one, colour)
    return parts + legend_parts
