#!/usr/bin/env python3
"""Generate the chart's Grafana dashboards (helm/dpjob-operator/dashboards/*.json) with
``grafana-foundation-sdk``, the dashboards-as-code SDK that Grafana Labs maintains.

The JSON files are what the chart ships (and what a user can import by hand); this script is
their source so that queries are reviewed as PromQL rather than as a 2,000-line JSON diff. The
SDK owns the dashboard model (typed builders generated from Grafana's own schema), the grid layout
and the JSON encoding; this file owns only what to show.
``python3 helm/tools/dashboards.py`` rewrites them; ``--check`` fails when they are stale
(tests/unit/test_dashboards.py runs the check).

Conventions (shared/reference/performance-and-observability.md section 4):
- a ``datasource`` variable (type ``datasource``, query ``prometheus``) and every panel and
  target referencing ``{"type": "prometheus", "uid": "${datasource}"}``; never ``${DS_PROMETHEUS}``
  and no ``__inputs`` (file provisioning never runs the import wizard);
- ``$__rate_interval`` in every ``rate()``;
- trainer series are filtered with ``namespace=~"$namespace", dpjob_job=~"$job"``: the chart's
  PodMonitor relabels the pod label ``dpjob.io/job-name`` to ``dpjob_job`` (Prometheus' own
  ``job`` label is the scrape job);
- operator series are filtered with ``job=~"$operator"`` because controller-runtime names
  (``rest_client_requests_total``, ``workqueue_depth``...) are exported by every Go controller
  a cluster-wide Prometheus scrapes;
- label-carrying counters that only appear after their first increment (errors, restarts,
  deletions) end in ``or on() vector(0)`` so an idle operator shows 0, not "No data".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, common, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prometheus_model

OUT_DIR = Path(__file__).resolve().parent.parent / "dpjob-operator" / "dashboards"
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

T = 'namespace=~"$namespace", dpjob_job=~"$job"'  # trainer selector
OP = 'job=~"$operator"'  # operator selector
CTRL = f'{OP}, controller="dataparalleljob"'
RI = "$__rate_interval"
# Attach the trainer's global rank (a label of dpjob_trainer_info) to a per-target series.
RANK_JOIN = f'* on(job, instance) group_left(rank) dpjob_trainer_info{{{T}}}'

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
        if kind not in PANEL_KINDS:
            raise ValueError(kind)
        steps = [model.Threshold(value=value, color=color) for value, color in (thresholds or [(None, "green")])]
        panel = (PANEL_KINDS[kind]().id(self._next_id()).title(title).description(description).datasource(DS)
                 .span(w).height(h).unit(unit)
                 .thresholds(dashboard.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)))
        if decimals is not None:
            panel.decimals(decimals)
        if min_ is not None:
            panel.min(min_)
        if max_ is not None:
            panel.max(max_)
        opts = options or {}
        reduce = common.ReduceDataOptions().calcs(["lastNotNull"]).values(False).fields("")
        if kind == "timeseries":
            panel.draw_style(common_model.GraphDrawStyle.LINE).line_width(1).fill_opacity(10) \
                .show_points(common_model.VisibilityMode.NEVER).span_nulls(False) \
                .color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.PALETTE_CLASSIC)) \
                .legend(common.VizLegendOptions().display_mode(common_model.LegendDisplayMode.LIST)
                        .placement(common_model.LegendPlacement.BOTTOM).show_legend(True)) \
                .tooltip(common.VizTooltipOptions().mode(common_model.TooltipDisplayMode.MULTI)
                         .sort(common_model.SortOrder.DESCENDING))
        elif kind == "stat":
            panel.color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS)).reduce_options(reduce) \
                .color_mode(common_model.BigValueColorMode.VALUE) \
                .graph_mode(common_model.BigValueGraphMode(opts.get("graphMode", "area"))) \
                .justify_mode(common_model.BigValueJustifyMode.AUTO) \
                .text_mode(common_model.BigValueTextMode(opts.get("textMode", "auto"))) \
                .orientation(common_model.VizOrientation.AUTO)
        else:  # bargauge
            panel.color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS)).reduce_options(reduce) \
                .display_mode(common_model.BarGaugeDisplayMode.BASIC) \
                .orientation(common_model.VizOrientation.HORIZONTAL).show_unfilled(True)
        for i, (expr, legend) in enumerate(targets):
            panel.with_target(prometheus.Dataquery().ref_id(chr(ord("A") + i)).datasource(DS).expr(expr)
                              .legend_format(legend).range().editor_mode(prometheus_model.QueryEditorMode.CODE))
        self.items.append(("panel", panel))


def _datasource_var() -> Any:
    return dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")


def _query_var(name: str, label: str, query: str, *, all_value: str | None = ".*") -> Any:
    """A label_values() variable with an "All" option; all_value None: "All" means the listed values."""
    var = (dashboard.QueryVariable(name).label(label).datasource(DS).query(query)
           .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(model.VariableSort.ALPHABETICAL_ASC)
           .include_all(True))
    if all_value is not None:
        var.all_value(all_value)
    return var


def _dashboard(uid: str, title: str, description: str, tags: list[str], variables: list[Any],
               board: Board) -> dict[str, Any]:
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


def training() -> dict[str, Any]:
    b = Board()
    b.row("Job health")
    b.panel("stat", "Ranks reporting", [(f"count(dpjob_trainer_info{{{T}}})", "ranks")], w=4, h=5,
            description="Trainer processes whose /metrics endpoint is scraped (dpjob_trainer_info).")
    b.panel("stat", "World size", [(f"count by (world_size) (dpjob_trainer_info{{{T}}})", "{{world_size}}")],
            w=4, h=5, options={"textMode": "name", "graphMode": "none"},
            description="WORLD_SIZE reported by the trainers; compare with ranks reporting.")
    b.panel("stat", "Ranks down", [(f'count(up{{{T}, dpjob_job!=""}} == 0) or on() vector(0)', "down")],
            w=4, h=5, thresholds=[(None, "green"), (1, "red")],
            description="Trainer targets Prometheus cannot scrape (crashed, OOM-killed or not yet started).")
    b.panel("stat", "Seconds since last step (slowest rank)",
            [(f"time() - min(dpjob_trainer_last_step_timestamp_seconds{{{T}}})", "age")], w=4, h=5, unit="s",
            thresholds=[(None, "green"), (120, "orange"), (600, "red")],
            description="A growing value means a hung rank (a collective waiting for a peer, a stuck loader).")
    b.panel("stat", "Steps/s", [(f"avg(rate(dpjob_trainer_steps_total{{{T}}}[{RI}]))", "steps/s")], w=4, h=5,
            unit="ops", description="Optimizer steps per second (ranks step in lockstep, averaged).")
    b.panel("stat", "Samples/s", [(f"sum(rate(dpjob_trainer_samples_total{{{T}}}[{RI}]))", "samples/s")], w=4,
            h=5, unit="short", description="Real samples per second summed over all ranks.")
    b.panel("timeseries", "Seconds since last step, per rank",
            [(f"(time() - dpjob_trainer_last_step_timestamp_seconds{{{T}}}) {RANK_JOIN}", "rank {{rank}}")],
            w=24, h=7, unit="s", description="Time since each rank finished its last step.")

    b.row("Throughput")
    b.panel("timeseries", "Throughput (samples/s)",
            [(f"sum by (namespace, dpjob_job) (rate(dpjob_trainer_samples_total{{{T}}}[{RI}]))",
              "{{namespace}}/{{dpjob_job}}")], w=8, unit="short",
            description="Samples per second, summed over the ranks of each job.")
    b.panel("timeseries", "Step time p50 / p99",
            [(f"histogram_quantile(0.5, sum by (le) (rate(dpjob_trainer_step_duration_seconds_bucket{{{T}}}[{RI}])))",
              "p50"),
             (f"histogram_quantile(0.99, sum by (le) (rate(dpjob_trainer_step_duration_seconds_bucket{{{T}}}[{RI}])))",
              "p99"),
             (f"sum(rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}])) / "
              f"sum(rate(dpjob_trainer_step_duration_seconds_count{{{T}}}[{RI}]))", "mean")],
            w=8, unit="s", description="Wall time of one optimizer step over all selected ranks.")
    b.panel("timeseries", "Steps/s per rank",
            [(f"rate(dpjob_trainer_steps_total{{{T}}}[{RI}]) {RANK_JOIN}", "rank {{rank}}")], w=8, unit="ops")

    b.row("Efficiency")
    b.panel("timeseries", "Data-wait ratio",
            [(f"sum(rate(dpjob_trainer_data_wait_seconds_total{{{T}}}[{RI}])) / "
              f"sum(rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}]))", "all ranks"),
             (f"max(rate(dpjob_trainer_data_wait_seconds_total{{{T}}}[{RI}]) / "
              f"rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}]))", "worst rank")],
            w=8, unit="percentunit", min_=0,
            thresholds=[(None, "green"), (0.1, "orange"), (0.3, "red")],
            description="Share of step time spent waiting for the data loader. Above ~10%: more workers, "
                        "pinned memory, faster storage.")
    b.panel("timeseries", "Exposed-communication ratio",
            [(f"sum(rate(dpjob_trainer_comm_exposed_seconds_total{{{T}}}[{RI}])) / "
              f"sum(rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}]))", "all ranks"),
             (f"max(rate(dpjob_trainer_comm_exposed_seconds_total{{{T}}}[{RI}]) / "
              f"rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}]))", "worst rank")],
            w=8, unit="percentunit", min_=0,
            description="Share of step time spent in gradient all-reduce not hidden behind backward compute.")
    b.panel("timeseries", "Per-rank skew (max - min)",
            [(f"max(rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}]) / "
              f"rate(dpjob_trainer_step_duration_seconds_count{{{T}}}[{RI}])) - "
              f"min(rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}]) / "
              f"rate(dpjob_trainer_step_duration_seconds_count{{{T}}}[{RI}]))", "mean step time skew"),
             (f"max(rate(dpjob_trainer_data_wait_seconds_total{{{T}}}[{RI}])) - "
              f"min(rate(dpjob_trainer_data_wait_seconds_total{{{T}}}[{RI}]))", "data-wait s/s skew")],
            w=8, unit="s",
            description="Difference between the slowest and the fastest rank. A straggler shows as a step "
                        "time skew; the others then wait in the all-reduce (their exposed communication rises).")
    b.panel("timeseries", "Mean step time per rank",
            [(f"(rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}]) / "
              f"rate(dpjob_trainer_step_duration_seconds_count{{{T}}}[{RI}])) {RANK_JOIN}", "rank {{rank}}")],
            w=12, unit="s")
    b.panel("timeseries", "Data-wait ratio per rank",
            [(f"(rate(dpjob_trainer_data_wait_seconds_total{{{T}}}[{RI}]) / "
              f"rate(dpjob_trainer_step_duration_seconds_sum{{{T}}}[{RI}])) {RANK_JOIN}", "rank {{rank}}")],
            w=12, unit="percentunit", min_=0)
    b.panel("timeseries", "Slowest rank: own step time / median",
            [(f"max by (namespace, dpjob_job) (dpjob_trainer_slowest_rank_ratio{{{T}}})",
              "{{namespace}}/{{dpjob_job}}")],
            w=12, unit="short", min_=1, thresholds=[(None, "green"), (1.5, "orange"), (3, "red")],
            description="Rank 0's view: the slowest rank's own step time (wall time minus waiting for the others' "
                        "gradients) over the median of all ranks'. 1 means even; the operator reports a straggler at "
                        "runPolicy.stragglerFactor (1.5) for 3 steps in a row.")
    b.panel("stat", "Straggler rank",
            [(f"max by (namespace, dpjob_job) (dpjob_trainer_straggler_rank{{{T}}})", "{{namespace}}/{{dpjob_job}}")],
            w=12, decimals=0, thresholds=[(None, "green"), (0, "orange")],
            description="The rank holding the gang back (status.progress.slowestRank), or -1 when none.",
            options={"graphMode": "none"})

    b.row("Model")
    b.panel("timeseries", "Loss", [(f"max by (namespace, dpjob_job) (dpjob_trainer_loss{{{T}}})",
                                    "{{namespace}}/{{dpjob_job}}")], w=8,
            description="Loss of the last step, averaged over all ranks by the trainer.")
    b.panel("timeseries", "Learning rate", [(f"max by (namespace, dpjob_job) (dpjob_trainer_learning_rate{{{T}}})",
                                             "{{namespace}}/{{dpjob_job}}")], w=8)
    b.panel("timeseries", "Gradient norm", [(f"max by (namespace, dpjob_job) (dpjob_trainer_grad_norm{{{T}}})",
                                             "{{namespace}}/{{dpjob_job}}")], w=8,
            description="L2 norm of the reduced gradient; spikes precede loss divergence.")
    b.panel("timeseries", "Epoch", [(f"max by (namespace, dpjob_job) (dpjob_trainer_epoch{{{T}}})",
                                     "{{namespace}}/{{dpjob_job}}")], w=12, decimals=0)
    b.panel("timeseries", "Checkpoint save time p99",
            [(f"histogram_quantile(0.99, sum by (le) "
              f"(rate(dpjob_trainer_checkpoint_duration_seconds_bucket{{{T}}}[{RI}])))", "p99")],
            w=12, unit="s", description="Empty between checkpoints (no saves in the window).")

    variables = [
        _datasource_var(),
        _query_var("namespace", "Namespace", "label_values(dpjob_trainer_info, namespace)"),
        _query_var("job", "Job", 'label_values(dpjob_trainer_info{namespace=~"$namespace"}, dpjob_job)'),
    ]
    return _dashboard("dpjob-training", "DataParallelJob training",
                      "Health, throughput, efficiency and model signals of DataParallelJob trainers "
                      "(dpjob_trainer_* metrics scraped by the chart's PodMonitor).",
                      ["dpjob", "training", "ddp"], variables, b)


def operator() -> dict[str, Any]:
    b = Board()
    b.row("Jobs")
    b.panel("bargauge", "Jobs by phase", [(f"sum by (phase) (dpjob_jobs{{{OP}}})", "{{phase}}")], w=6, h=8,
            decimals=0, description="DataParallelJobs the operator knows, by status.phase.")
    b.panel("timeseries", "Jobs by phase over time", [(f"sum by (phase) (dpjob_jobs{{{OP}}})", "{{phase}}")],
            w=6, decimals=0)
    b.panel("timeseries", "Jobs waiting for nodes",
            [(f"sum by (reason) (dpjob_jobs_unschedulable{{{OP}}})", "{{reason}}")], w=6, decimals=0,
            description="GangUnschedulable: the whole gang does not fit and holds no node (gang scheduling). "
                        "Unschedulable: ranks placed one by one, some waiting while the others hold nodes.")
    b.panel("timeseries", "Phase transitions/s",
            [(f"sum by (phase) (rate(dpjob_job_transitions_total{{{OP}}}[{RI}])) or on() vector(0)", "{{phase}}")],
            w=6, unit="ops")

    b.row("Reconcile")
    b.panel("timeseries", "Reconcile rate",
            [(f"sum by (result) (rate(controller_runtime_reconcile_total{{{CTRL}}}[{RI}]))", "{{result}}")],
            w=6, unit="ops")
    b.panel("timeseries", "Reconcile errors/s",
            [(f"sum(rate(controller_runtime_reconcile_errors_total{{{CTRL}}}[{RI}])) or on() vector(0)", "errors")],
            w=6, unit="ops", thresholds=[(None, "green"), (0.01, "red")])
    b.panel("timeseries", "Reconcile latency p50 / p99",
            [(f"histogram_quantile(0.5, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket"
              f"{{{CTRL}}}[{RI}])))", "p50"),
             (f"histogram_quantile(0.99, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket"
              f"{{{CTRL}}}[{RI}])))", "p99")], w=6, unit="s")
    b.panel("timeseries", "Work queue",
            [(f'sum(workqueue_depth{{{OP}, name="dataparalleljob"}})', "depth"),
             (f'sum(rate(workqueue_adds_total{{{OP}, name="dataparalleljob"}}[{RI}]))', "adds/s")], w=6)

    b.row("Rank pods")
    b.panel("timeseries", "Pods created/s",
            [(f"sum(rate(dpjob_pods_created_total{{{OP}}}[{RI}]))", "created"),
             (f"sum by (reason) (rate(dpjob_pods_deleted_total{{{OP}}}[{RI}])) or on() vector(0)",
              "deleted {{reason}}")], w=8, unit="ops")
    b.panel("timeseries", "Time to all ranks running p50 / p99",
            [(f"histogram_quantile(0.5, sum by (le) (rate(dpjob_time_to_all_ranks_running_seconds_bucket"
              f"{{{OP}}}[{RI}])))", "running p50"),
             (f"histogram_quantile(0.99, sum by (le) (rate(dpjob_time_to_all_ranks_running_seconds_bucket"
              f"{{{OP}}}[{RI}])))", "running p99"),
             (f"histogram_quantile(0.99, sum by (le) (rate(dpjob_time_to_all_pods_created_seconds_bucket"
              f"{{{OP}}}[{RI}])))", "all pods created p99")], w=8, unit="s",
            description="From a gang's start (job seen or restart decided) to all pods created / all ranks "
                        "Running. Empty when no gang started in the window.")
    b.panel("timeseries", "Gang restarts by reason",
            [(f"sum by (reason) (increase(dpjob_restarts_total{{{OP}}}[{RI}])) or on() vector(0)", "{{reason}}")],
            w=8, decimals=0)
    b.panel("stat", "Gang restarts (total)",
            [(f"sum by (reason) (dpjob_restarts_total{{{OP}}}) or on() vector(0)", "{{reason}}")], w=8, h=5,
            decimals=0, thresholds=[(None, "green"), (1, "orange")])
    b.panel("stat", "Pods created (total)", [(f"sum(dpjob_pods_created_total{{{OP}}})", "pods")], w=8, h=5,
            decimals=0)
    b.panel("stat", "Operator up", [(f"sum(up{{{OP}}})", "up")], w=8, h=5, decimals=0,
            thresholds=[(None, "red"), (1, "green")])

    b.row("Kubernetes API client")
    b.panel("timeseries", "API requests/s by method and code",
            [(f"sum by (method, code) (rate(rest_client_requests_total{{{OP}}}[{RI}]))", "{{method}} {{code}}")],
            w=8, unit="reqps")
    b.panel("timeseries", "API latency p99 by verb",
            [(f"histogram_quantile(0.99, sum by (le, verb) (rate(rest_client_request_duration_seconds_bucket"
              f"{{{OP}}}[{RI}])))", "{{verb}}")],
            w=8, unit="s",
            description="How long the API server took to answer the operator. When reconcile time rises with "
                        "this, the API server (or the network to it) is the slow part, not the operator.")
    b.panel("timeseries", "Rate-limiter wait p99 / mean",
            [(f"histogram_quantile(0.99, sum by (le) (rate(rest_client_rate_limiter_duration_seconds_bucket"
              f"{{{OP}}}[{RI}]))) or vector(0)", "p99"),
             (f"(sum(rate(rest_client_rate_limiter_duration_seconds_sum{{{OP}}}[{RI}])) / "
              f"sum(rate(rest_client_rate_limiter_duration_seconds_count{{{OP}}}[{RI}]))) or vector(0)", "mean")],
            w=8, unit="s",
            description="Time requests wait for the client-side token bucket, which exists only when apiQPS > 0; "
                        "with the default -1 (API Priority and Fairness decides) nothing waits and this reads 0. "
                        "Sustained waits mean the operator is throttling itself.")

    variables = [
        _datasource_var(),
        # "All" = every scrape job exporting dpjob_jobs, never ".*" (that would sum other controllers).
        _query_var("operator", "Operator scrape job", "label_values(dpjob_jobs, job)", all_value=None),
    ]
    return _dashboard("dpjob-operator", "dpjob operator",
                      "The DataParallelJob operator: reconciles, rank pods, restarts and API client "
                      "(controller-runtime metric names plus dpjob_*).",
                      ["dpjob", "operator"], variables, b)


DASHBOARDS = {"dpjob-training.json": training, "dpjob-operator.json": operator}


def render(build: Callable[[], dict[str, Any]]) -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the JSON files are not up to date")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = OUT_DIR / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    if stale:
        print("stale dashboards (run python3 helm/tools/dashboards.py):", *stale, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
