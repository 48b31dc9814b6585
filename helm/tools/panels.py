"""Grafana building blocks of the dashboards: panels in rows, template variables, the dashboard.

``grafana-foundation-sdk`` owns the dashboard model, the grid layout and the JSON encoding; this
module fixes what every dpjob dashboard shares:
- a ``datasource`` variable (type ``datasource``, query ``prometheus``) and every panel and target
  referencing ``{"type": "prometheus", "uid": "${datasource}"}``; never ``${DS_PROMETHEUS}`` and no
  ``__inputs`` (file provisioning never runs the import wizard);
- one look per panel kind (lines for time series, the last value for stats and bar gauges).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.builders import bargauge, common, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prometheus_model

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

PANEL_KINDS: dict[str, Callable[[], Any]] = {"timeseries": timeseries.Panel, "stat": stat.Panel,
                                             "bargauge": bargauge.Panel}


class Board:
    """Collects rows and panels in order; the SDK's Dashboard builder lays them out on the grid."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []
        self._id = 0

    def _next_id(self) -> int:
        self._id += 1
        return self._id

    def row(self, title: str) -> None:
        self.items.append(("row", dashboard.Row(title).id(self._next_id())))

    def panel(self, kind: str, title: str, targets: list[tuple[str, str]], *, w: int = 8, h: int = 8,
              unit: str = "short", description: str = "", decimals: int | None = None,
              thresholds: list[tuple[float | None, str]] | None = None, min_: float | None = None,
              max_: float | None = None, options: dict[str, Any] | None = None) -> None:
        """A panel of ``w`` x ``h`` grid units showing one PromQL query per ``(expr, legend)`` target."""
        if kind not in PANEL_KINDS:
            raise ValueError(kind)
        steps = [model.Threshold(value=value, color=color) for value, color in (thresholds or [(None, "green")])]
        panel = (PANEL_KINDS[kind]().id(self._next_id()).title(title).description(description)
                 .datasource(DATASOURCE).span(w).height(h).unit(unit)
                 .thresholds(dashboard.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)))
        if decimals is not None:
            panel.decimals(decimals)
        if min_ is not None:
            panel.min(min_)
        if max_ is not None:
            panel.max(max_)
        _STYLES[kind](panel, options or {})
        for i, (expr, legend) in enumerate(targets):
            panel.with_target(prometheus.Dataquery().ref_id(chr(ord("A") + i)).datasource(DATASOURCE).expr(expr)
                              .legend_format(legend).range().editor_mode(prometheus_model.QueryEditorMode.CODE))
        self.items.append(("panel", panel))


def _last_value() -> Any:
    return common.ReduceDataOptions().calcs(["lastNotNull"]).values(False).fields("")


def _style_timeseries(panel: Any, options: dict[str, Any]) -> None:
    panel.draw_style(common_model.GraphDrawStyle.LINE).line_width(1).fill_opacity(10) \
        .show_points(common_model.VisibilityMode.NEVER).span_nulls(False) \
        .color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.PALETTE_CLASSIC)) \
        .legend(common.VizLegendOptions().display_mode(common_model.LegendDisplayMode.LIST)
                .placement(common_model.LegendPlacement.BOTTOM).show_legend(True)) \
        .tooltip(common.VizTooltipOptions().mode(common_model.TooltipDisplayMode.MULTI)
                 .sort(common_model.SortOrder.DESCENDING))


def _style_stat(panel: Any, options: dict[str, Any]) -> None:
    """``options``: ``graphMode`` (default ``area``) and ``textMode`` (default ``auto``)."""
    panel.color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS)).reduce_options(_last_value()) \
        .color_mode(common_model.BigValueColorMode.VALUE) \
        .graph_mode(common_model.BigValueGraphMode(options.get("graphMode", "area"))) \
        .justify_mode(common_model.BigValueJustifyMode.AUTO) \
        .text_mode(common_model.BigValueTextMode(options.get("textMode", "auto"))) \
        .orientation(common_model.VizOrientation.AUTO)


def _style_bargauge(panel: Any, options: dict[str, Any]) -> None:
    panel.color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS)).reduce_options(_last_value()) \
        .display_mode(common_model.BarGaugeDisplayMode.BASIC) \
        .orientation(common_model.VizOrientation.HORIZONTAL).show_unfilled(True)


_STYLES: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "timeseries": _style_timeseries, "stat": _style_stat, "bargauge": _style_bargauge}


def datasource_variable() -> Any:
    return dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")


def query_variable(name: str, label: str, query: str, *, all_value: str | None = ".*") -> Any:
    """A label_values() variable with an "All" option; all_value None: "All" means the listed values."""
    var = (dashboard.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
           .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(model.VariableSort.ALPHABETICAL_ASC)
           .include_all(True))
    if all_value is not None:
        var.all_value(all_value)
    return var


def build_dashboard(uid: str, title: str, description: str, tags: list[str], variables: list[Any],
                    rows: list[Callable[[Board], None]]) -> dict[str, Any]:
    """The dashboard as a JSON-ready dict: the shared time range, refresh and tooltip, then each of
    ``rows`` adding its row and panels in order (panel ids follow that order)."""
    board = Board()
    for add_row in rows:
        add_row(board)
    builder = (dashboard.Dashboard(title).uid(uid).description(description).tags(tags).editable()
               .tooltip(model.DashboardCursorSync.CROSSHAIR).timezone("browser").time("now-1h", "now")
               .refresh("30s").timepicker(dashboard.TimePicker().refresh_intervals(["10s", "30s", "1m", "5m", "15m"]))
               .variables(variables))
    for kind, item in board.items:
        if kind == "row":
            builder.with_row(item)
        else:
            builder.with_panel(item)
    return json.loads(JSONEncoder(sort_keys=True).encode(builder.build()))
