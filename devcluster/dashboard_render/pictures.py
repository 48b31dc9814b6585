"""``make dashboard-pictures``: the chart's Grafana dashboards drawn as SVG from a run's Prometheus.

Every panel's PromQL, with Grafana's variables expanded as ``devcluster/dashboards.py`` expands them
(unset variables match everything), runs as a range query over the last ``--since`` seconds; the
window drawn is then narrowed to the samples found, so a Prometheus that started ten minutes ago
does not leave twenty empty minutes in every plot. One ``<dashboard>.svg`` per dashboard file.

Usage: ``python -m devcluster.dashboard_render.pictures [--prometheus URL] [--out DIR] [--since S]
[--var NAME=VALUE ...]``; without ``--prometheus``, the dev cluster's (``make dev`` starts it).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from devcluster import dashboards, prometheus_api
from devcluster.dashboard_render.model import Dashboard, Panel, Series, load_dashboard, series_from_matrix
from devcluster.dashboard_render.page import render_dashboard
from devcluster.dashboard_render.scale import Range

OUT = dashboards.REPO / "docs" / "images" / "dashboards"
MAX_POINTS = 400  # samples per series, about one per two pixels of a full-width panel

Data = dict[Panel, list[Series]]


class PictureError(Exception):
    """Why no picture was drawn, in one line."""


def picture_names(directory: Path = dashboards.DASHBOARD_DIR) -> list[str]:
    """The files the pictures command writes: one ``<dashboard>.svg`` per dashboard JSON."""
    return [f"{path.stem}.svg" for path in sorted(directory.glob("*.json"))]


def step_seconds(since: float) -> int:
    return max(1, math.ceil(since / MAX_POINTS))


def fetch(url: str, dashboard: Dashboard, window: Range, step: int, values: Mapping[str, str]) -> Data:
    """Every panel's series over ``window``; a query Prometheus refuses is an error naming the panel."""
    data: Data = {}
    for panel in dashboard.panels:
        for query in panel.queries:
            expr = dashboards.substitute(query.expr, values)
            try:
                result = prometheus_api.query_range(url, expr, window.lo, window.hi, f"{step}s", timeout=30.0)
            except ValueError as e:
                raise PictureError(f"{dashboard.name}: panel {panel.title!r} query {query.ref_id}: {e}") from None
            data.setdefault(panel, []).extend(series_from_matrix(result, query))
    return data


def data_window(all_data: Iterable[Data], requested: Range, step: int) -> Range:
    """The requested window narrowed to the samples found; the requested one when there are none."""
    times = [t for data in all_data for panel_series in data.values() for one in panel_series for t, _ in one.points]
    if not times or max(times) - min(times) < 2 * step:
        return requested
    return Range(min(times), max(times))


def check_reachable(url: str) -> None:
    try:
        prometheus_api.query(url, "vector(1)", timeout=5.0)
    except OSError as e:  # refused, unresolvable, timed out: urllib's URLError is an OSError
        reason = getattr(e, "reason", e)
        raise PictureError(f"Prometheus at {url} is unreachable ({reason}); the pictures need a run's data: "
                           "make dev, then make dashboard-pictures") from None


def source_digest(path: Path) -> str:
    """``sha256:<first 16 hex>`` of a dashboard file: what its picture records it was drawn from."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def draw(url: str, out: Path, since: float, values: Mapping[str, str],
         directory: Path = dashboards.DASHBOARD_DIR) -> list[Path]:
    """Query, render and write every dashboard's picture; returns the files written."""
    check_reachable(url)
    step = step_seconds(since)
    end = math.floor(time.time() / step) * step
    requested = Range(float(end - math.ceil(since / step) * step), float(end))
    boards = [load_dashboard(path) for path in sorted(directory.glob("*.json"))]
    try:
        fetched = [fetch(url, board, requested, step, values) for board in boards]
    except OSError as e:
        raise PictureError(f"Prometheus at {url} stopped answering: {getattr(e, 'reason', e)}") from None
    window = data_window(fetched, requested, step)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for board, data in zip(boards, fetched, strict=True):
        path = out / f"{board.name}.svg"
        path.write_text(render_dashboard(board, data, window, source=source_digest(directory / f"{board.name}.json")))
        drawn = sum(1 for panel in board.panels if any(s.points for s in data.get(panel, [])))
        print(f"{path}: {drawn} of {sum(1 for p in board.panels if p.queries)} panels with data")
        written.append(path)
    return written


def dev_prometheus() -> str:
    """The dev cluster's Prometheus, where ``make dev`` starts it."""
    from devcluster.dev import PROM_PORT

    return f"http://127.0.0.1:{PROM_PORT}"


def variable(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, e.g. job=quickstart, got {text!r}")
    return name, value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dashboard-pictures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", help="Prometheus' base URL (default: the dev cluster's, as make dev starts it)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder for <dashboard>.svg (default: %(default)s)")
    parser.add_argument("--since", type=float, default=3600.0,
                        help="seconds of history to query, narrowed to the samples found (default: %(default)s)")
    parser.add_argument("--var", action="append", default=[], type=variable, metavar="NAME=VALUE",
                        help="a dashboard variable's value, e.g. job=quickstart (default: all)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    values = dict(args.var)
    try:
        draw(args.prometheus or dev_prometheus(), args.out, args.since, values)
    except PictureError as e:
        print(f"dashboard-pictures: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
