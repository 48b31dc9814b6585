"""One dashboard as one SVG picture: its title, the time window, and every panel placed by its
gridPos as Grafana places it (24 columns; rows of 30 px with 8 px between panels)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from devcluster.dashboard_render import svg, timeseries
from devcluster.dashboard_render.model import Dashboard, Panel, Series
from devcluster.dashboard_render.scale import Range
from devcluster.dashboard_render.stat import render_bargauge, render_stat

WIDTH = 1600.0
MARGIN = 16.0
HEADER = 64.0
COLUMNS = 24
CELL_HEIGHT = 30.0
GAP = 8.0


def place(panel: Panel, width: float = WIDTH) -> svg.Box:
    """The panel's pixels on the page: gridPos columns of (width - margins) / 24, gaps between."""
    column = (width - 2 * MARGIN + GAP) / COLUMNS
    grid = panel.grid
    return svg.Box(MARGIN + grid.x * column, HEADER + grid.y * (CELL_HEIGHT + GAP),
                   grid.w * column - GAP, grid.h * CELL_HEIGHT + (grid.h - 1) * GAP)


def layout(dashboard: Dashboard, width: float = WIDTH) -> list[tuple[Panel, svg.Box]]:
    """Every panel with its box, in the dashboard's order."""
    return [(panel, place(panel, width)) for panel in dashboard.panels]


def page_height(boxes: Sequence[svg.Box]) -> float:
    return max((box.bottom for box in boxes), default=HEADER) + MARGIN


def row_header(panel: Panel, box: svg.Box) -> list[str]:
    """A dashboard row: its title across the page, as Grafana draws an expanded row."""
    return [svg.text(box.x, box.y + box.h / 2 + 6.0, panel.title, size=16.0, weight="600")]


def render_panel(panel: Panel, series: Sequence[Series], box: svg.Box, window: Range) -> list[str]:
    """The panel's elements by its type; a type not drawn here says so in its frame."""
    if panel.type == "row":
        return row_header(panel, box)
    if panel.type == "timeseries":
        return timeseries.render(panel, series, box, window)
    if panel.type in ("stat", "gauge"):
        return render_stat(panel, series, box, window)
    if panel.type == "bargauge":
        return render_bargauge(panel, series, box, window)
    return svg.no_data(box, panel.title, f"{panel.type} panels are not drawn here")


def window_text(window: Range) -> str:
    start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(window.lo))
    end = time.strftime("%H:%M:%S", time.gmtime(window.hi))
    return f"{start} to {end} UTC"


def header(dashboard: Dashboard, window: Range, width: float) -> list[str]:
    note = (f"{window_text(window)}. Drawn by make dashboard-pictures from the dashboard's own PromQL "
            "on a run's Prometheus; not a Grafana screenshot.")
    return [svg.text(MARGIN, 30.0, dashboard.title, size=20.0, weight="600"),
            svg.text(MARGIN, 50.0, svg.clip(note, width - 2 * MARGIN, 12.0), size=12.0, fill=svg.MUTED)]


def render_dashboard(dashboard: Dashboard, data: Mapping[Panel, Sequence[Series]], window: Range,
                     width: float = WIDTH, source: str = "") -> str:
    """The whole picture as SVG text: the same dashboard, data and window give the same bytes.
    ``source``: the digest of the dashboard file it was drawn from, kept in a comment so that a
    test can tell a picture older than its dashboard."""
    placed = layout(dashboard, width)
    height = page_height([box for _, box in placed])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{svg.num(width)}" height="{svg.num(height)}" '
             f'viewBox="0 0 {svg.num(width)} {svg.num(height)}" font-family="{svg.FONT}">',
             *([f"<!-- drawn by make dashboard-pictures from {dashboard.name}.json {source} -->"] if source else []),
             svg.rect(svg.Box(0.0, 0.0, width, height), svg.BACKGROUND), *header(dashboard, window, width)]
    for panel, box in placed:
        parts.append(svg.group(render_panel(panel, data.get(panel, ()), box, window)))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
