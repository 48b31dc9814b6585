"""The dashboard pictures (devcluster/dashboard_render/): Grafana's units and legends, the layout of
both real dashboards, what a timeseries draws, byte-identical output, every panel of both
dashboards drawn from a Prometheus-shaped matrix built here as plain data, and the docs page that
shows the pictures. No Prometheus needed: rendering is a function of the data."""

from __future__ import annotations

import itertools
import math
import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from devcluster import dashboards
from devcluster.dashboard_render import pictures, svg, timeseries
from devcluster.dashboard_render.model import GridPos, Panel, Query, Series, legend, load_dashboard, series_from_matrix
from devcluster.dashboard_render.page import WIDTH, layout, render_dashboard
from devcluster.dashboard_render.scale import Range, nice_step, ticks, time_ticks, value_range
from devcluster.dashboard_render.stat import threshold_colour
from devcluster.dashboard_render.units import format_value
from tests.support.paths import REPO

pytestmark = pytest.mark.unit

NS = "{http://www.w3.org/2000/svg}"
DASHBOARD_FILES = sorted(dashboards.DASHBOARD_DIR.glob("*.json"))
PAGE = REPO / "docs" / "observability.md"
T0 = 1_767_000_000.0  # a fixed start time: the pictures depend on nothing but their input


@pytest.mark.parametrize(("value", "unit", "decimals", "expected"), [
    (0, "short", None, "0"),
    (3, "short", None, "3"),
    (12.3456, "short", None, "12.3"),
    (1500, "short", None, "1.5 K"),
    (2_000_000, "short", None, "2 Mil"),
    (999_960, "short", None, "1 Mil"),
    (0.001234, "short", None, "0.0012"),
    (7, "short", 0, "7"),
    (6.6, "short", 0, "7"),
    (0, "s", None, "0 s"),
    (0.25, "s", None, "250 ms"),
    (0.3000000004, "s", None, "300 ms"),
    (0.0000123, "s", None, "12.3 µs"),
    (1.5, "s", None, "1.5 s"),
    (90, "s", None, "1.5 min"),
    (7200, "s", None, "2 hour"),
    (250, "ms", None, "250 ms"),
    (1500, "ms", None, "1.5 s"),
    (0.5, "percentunit", None, "50%"),
    (0.0123, "percentunit", None, "1.23%"),
    (42, "percent", None, "42%"),
    (12, "ops", None, "12 ops"),
    (0.5, "ops", None, "0.5 ops"),
    (2500, "reqps", None, "2.5K req/s"),
    (1536, "bytes", None, "1.5 KiB"),
    (3 * 1024 ** 3, "bytes", None, "3 GiB"),
    (1500, "decbytes", None, "1.5 kB"),
    (3, "none", None, "3"),
    (4, "widgets", None, "4 widgets"),
    (-0.00001, "short", None, "0"),
    (math.nan, "s", None, "NaN"),
])
def test_units_format_as_grafana_writes_them(value, unit, decimals, expected):
    assert format_value(value, unit, decimals) == expected


def test_every_unit_the_dashboards_use_is_formatted():
    from devcluster.dashboard_render.units import known

    units = {p.unit for path in DASHBOARD_FILES for p in load_dashboard(path).panels if p.queries}
    assert units and all(known(unit) for unit in units), sorted(units)


@pytest.mark.parametrize(("fmt", "labels", "expected"), [
    ("{{phase}}", {"phase": "Running"}, "Running"),
    ("rank {{ rank }}", {"rank": "3"}, "rank 3"),
    ("{{namespace}}/{{dpjob_job}}", {"namespace": "team-a", "dpjob_job": "resnet"}, "team-a/resnet"),
    ("{{method}} {{code}}", {"method": "GET"}, "GET code"),  # Grafana writes a missing label's name
    ("{{reason}}", {"reason": ""}, "reason"),
    ("p99", {"le": "1"}, "p99"),
    ("", {"__name__": "up", "job": "operator", "instance": "a:8080"}, 'up{instance="a:8080", job="operator"}'),
    ("", {"__name__": "up"}, "up"),
    ("", {}, "{}"),
])
def test_legend_format_substitutes_labels(fmt, labels, expected):
    assert legend(fmt, labels) == expected


def test_a_matrix_becomes_series_without_nan_samples():
    samples = [[T0, "1"], [T0 + 15, "NaN"], [T0 + 30, "+Inf"], [T0 + 45, "2"]]
    result = [{"metric": {"phase": "Running"}, "values": samples}]
    (series,) = series_from_matrix(result, Query("A", "x", "{{phase}}"))
    assert (series.legend, series.points, series.ref_id) == ("Running", ((T0, 1.0), (T0 + 45, 2.0)), "A")


@pytest.mark.parametrize(("span", "max_ticks", "step"), [
    (1.0, 5, 0.2), (10.0, 5, 2.0), (7.0, 5, 2.0), (0.03, 4, 0.01), (1000.0, 4, 250.0), (3.0, 3, 1.0),
])
def test_nice_steps(span, max_ticks, step):
    assert nice_step(span, max_ticks) == pytest.approx(step)


@pytest.mark.parametrize(("values", "lo", "hi", "expected"), [
    ([0.1, 0.7], None, None, Range(0.0, 0.8)),
    ([3.0, 9.0], None, None, Range(0.0, 10.0)),
    ([-2.0, 3.0], None, None, Range(-2.0, 3.0)),
    ([], None, None, Range(0.0, 1.0)),
    ([0.0, 0.0], None, None, Range(0.0, 1.0)),
    ([1.2, 1.9], 1.0, None, Range(1.0, 2.0)),
    ([0.2], 0.0, 1.0, Range(0.0, 1.0)),
])
def test_value_range(values, lo, hi, expected):
    assert value_range(values, lo, hi) == expected


def test_ticks_are_round_and_inside():
    assert ticks(Range(0.0, 0.3), 3) == [0.0, 0.1, 0.2, 0.3]
    assert time_ticks(Range(T0 + 5, T0 + 605), 6) == list(range(int(T0) + 120, int(T0) + 601, 120))


@pytest.mark.parametrize(("steps", "value", "colour"), [
    ((), 5.0, "green"), (((None, "green"), (1.0, "red")), 0.0, "green"), (((None, "green"), (1.0, "red")), 1.0, "red"),
    (((None, "green"), (120.0, "orange"), (600.0, "red")), 300.0, "orange"),
    (((None, "red"), (1.0, "green")), 0.0, "red"),
])
def test_threshold_colour(steps, value, colour):
    panel = Panel("p", "stat", GridPos(0, 0, 4, 4), thresholds=steps)
    assert threshold_colour(panel, value) == svg.NAMED[colour]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_layout_places_panels_by_gridpos_without_overlap(path):
    placed = layout(load_dashboard(path))
    assert len(placed) >= 10
    for panel, box in placed:
        assert box.w > 0 and box.h > 0 and box.x >= 0 and box.right <= WIDTH, (panel.title, box)
    for (a, box_a), (b, box_b) in itertools.combinations(placed, 2):
        apart = (box_a.right <= box_b.x or box_b.right <= box_a.x
                 or box_a.bottom <= box_b.y or box_b.bottom <= box_a.y)
        assert apart, f"{a.title!r} {box_a} overlaps {b.title!r} {box_b}"
    # Grafana's order: a panel further down the grid is lower on the page, one further right is right of it.
    for (a, box_a), (b, box_b) in itertools.combinations(placed, 2):
        if a.grid.y < b.grid.y:
            assert box_a.y < box_b.y
        if a.grid.y == b.grid.y and a.grid.x < b.grid.x:
            assert box_a.x < box_b.x


def points(element: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (pair.split(",") for pair in element.attrib["points"].split())]


def plot_area(root: ET.Element) -> svg.Box:
    """The plot as the grid lines span it: horizontal ones across, vertical ones down."""
    lines = [{k: float(v) for k, v in e.attrib.items() if k in ("x1", "x2", "y1", "y2")}
             for e in root.iter(f"{NS}line")]
    across = [ln for ln in lines if ln["y1"] == ln["y2"] and ln["x2"] - ln["x1"] > 20]
    down = [ln for ln in lines if ln["x1"] == ln["x2"]]
    x, y = min(ln["x1"] for ln in across), min(ln["y1"] for ln in down)
    return svg.Box(x, y, max(ln["x2"] for ln in across) - x, max(ln["y2"] for ln in down) - y)


def draw_timeseries(panel: Panel, series: list[Series], window: Range) -> ET.Element:
    body = "".join(timeseries.render(panel, series, svg.Box(10.0, 10.0, 600.0, 300.0), window))
    return ET.fromstring(f'<svg xmlns="http://www.w3.org/2000/svg">{body}</svg>')


@pytest.mark.parametrize(("unit", "lo", "values"), [
    ("s", None, [0.02, 0.5, 0.31, 0.07]),
    ("percentunit", 0.0, [0.0, 0.2, 0.9, 0.4]),
    ("short", 1.0, [0.5, 1.2, 3.0, 2.0]),  # below the fixed min: drawn on the edge, not outside
    ("ops", None, [-1.0, 2.0, 0.0, 5.0]),
])
def test_timeseries_polylines_stay_inside_the_plot(unit, lo, values):
    panel = Panel("Step time", "timeseries", GridPos(0, 0, 8, 8), unit=unit, min=lo)
    series = [Series({"rank": str(r)}, tuple((T0 + 15 * i, v * (r + 1)) for i, v in enumerate(values)), f"rank {r}")
              for r in range(3)]
    root = draw_timeseries(panel, series, Range(T0, T0 + 45))
    lines = list(root.iter(f"{NS}polyline"))
    assert len(lines) == 3
    area = plot_area(root)
    for line in lines:
        assert len(points(line)) == len(values)
        assert all(area.contains(x, y) for x, y in points(line)), (points(line), area)
    legend_texts = [t.text for t in root.iter(f"{NS}text")]
    assert {"rank 0", "rank 1", "rank 2"} <= set(legend_texts)


def test_a_gap_in_the_samples_breaks_the_line():
    samples = ((T0, 1.0), (T0 + 15, 2.0), (T0 + 120, 2.0), (T0 + 135, 1.0), (T0 + 300, 4.0))
    panel = Panel("p", "timeseries", GridPos(0, 0, 8, 8))
    root = draw_timeseries(panel, [Series({}, samples, "x")], Range(T0, T0 + 300))
    assert len(list(root.iter(f"{NS}polyline"))) == 2 and len(list(root.iter(f"{NS}circle"))) == 1


def synthetic_matrix(query: Query, unit: str, start: float, count: int = 40) -> list[dict]:
    """What Prometheus would answer for a query: two series labelled with the legend's labels."""
    names = re.findall(r"\{\{\s*(.+?)\s*\}\}", query.legend_format)
    scale = {"percentunit": 0.3, "s": 0.4}.get(unit, 50.0)
    return [{"metric": {name: f"{name}-{k}" for name in names},
             "values": [[start + 15 * i, f"{scale * (1 + k + math.sin(i / 5 + k)):.6g}"] for i in range(count)]}
            for k in range(2 if names else 1)]


def synthetic_data(path: Path) -> dict[Panel, list[Series]]:
    board = load_dashboard(path)
    return {panel: [s for q in panel.queries for s in series_from_matrix(synthetic_matrix(q, panel.unit, T0), q)]
            for panel in board.panels}


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_every_panel_of_the_dashboards_is_drawn(path):
    board = load_dashboard(path)
    picture = render_dashboard(board, synthetic_data(path), Range(T0, T0 + 39 * 15))
    root = ET.fromstring(picture)
    texts = [t.text or "" for t in root.iter(f"{NS}text")]
    assert board.title in texts
    assert len(root.findall(f"{NS}g")) == len(board.panels)
    assert not [t for t in texts if "No data" in t or "not drawn" in t]
    for group, panel in zip(root.findall(f"{NS}g"), board.panels, strict=True):
        titles = [t.text or "" for t in group.iter(f"{NS}text")]
        assert titles and (titles[0] == panel.title or titles[0].endswith("…")), (panel.title, titles[:1])
        if panel.type == "timeseries":
            assert len(list(group.iter(f"{NS}polyline"))) >= len(panel.queries), panel.title


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_a_dashboard_without_data_says_no_data_per_panel(path):
    board = load_dashboard(path)
    root = ET.fromstring(render_dashboard(board, {}, Range(T0, T0 + 600)))
    no_data = [t for t in root.iter(f"{NS}text") if t.text == "No data"]
    assert len(no_data) == sum(1 for panel in board.panels if panel.type != "row")


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_the_same_data_gives_the_same_bytes(path):
    board, window = load_dashboard(path), Range(T0, T0 + 39 * 15)
    first = render_dashboard(board, synthetic_data(path), window)
    again = render_dashboard(load_dashboard(path), dict(reversed(list(synthetic_data(path).items()))), window)
    assert first == again
    assert not re.search(r"\d\.\d{2,}", " ".join(re.findall(r'(?:x|y|x1|x2|y1|y2|width|height|points)="[^"]*"', first)))


def page_images() -> list[str]:
    tokens = MarkdownIt("commonmark").parse(PAGE.read_text())
    children = [child for token in tokens for child in token.children or []]
    return [str(child.attrGet("src")) for child in children if child.type == "image"]


def test_the_observability_page_shows_each_dashboard_picture():
    """Each image exists, or is a picture `make dashboard-pictures` writes (committed after a run on
    the dev cluster); every dashboard has its picture on the page."""
    produced = {(pictures.OUT / name).resolve() for name in pictures.picture_names()}
    images = page_images()
    for src in images:
        target = (PAGE.parent / src).resolve()
        assert target.exists() or target in produced, f"docs/observability.md shows {src}: no such file, not produced"
    assert produced <= {(PAGE.parent / src).resolve() for src in images}


def test_pictures_name_one_svg_per_dashboard_and_write_under_docs():
    assert pictures.picture_names() == [f"{p.stem}.svg" for p in DASHBOARD_FILES]
    assert pictures.OUT == REPO / "docs" / "images" / "dashboards"


def test_an_unreachable_prometheus_fails_in_one_line(tmp_path, capsys):
    with socket.socket() as sock:  # a port nothing listens on: bound, then released
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert pictures.main(["--prometheus", f"http://127.0.0.1:{port}", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unreachable" in err and "make dev" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("since", "step"), [(60, 1), (400, 1), (3600, 9), (86400, 216)])
def test_step_keeps_a_series_under_the_point_budget(since, step):
    assert pictures.step_seconds(since) == step


@pytest.mark.parametrize("path", sorted(dashboards.DASHBOARD_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_the_committed_picture_was_drawn_from_the_dashboard_as_it_is(path):
    """A dashboard changed after its picture was drawn: the picture in docs/ shows panels that are
    not there any more (or misses new ones)."""
    picture = REPO / "docs" / "images" / "dashboards" / f"{path.stem}.svg"
    assert picture.exists(), f"{picture} is missing: run `make dev` then `make dashboard-pictures` and commit it"
    assert pictures.source_digest(path) in picture.read_text(), (
        f"{picture.name} was drawn from an older {path.name}: run `make dev` then `make dashboard-pictures` "
        "and commit docs/images/dashboards/")
