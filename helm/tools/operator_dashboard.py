"""The operator dashboard (dpjob-operator.json): jobs, reconciles, rank pods and the Kubernetes API
client, from controller-runtime's metric names plus ``dpjob_*``, one function per row."""

from __future__ import annotations

from typing import Any

from panels import Board, build_dashboard, datasource_variable, query_variable
from promql import CONTROLLER_SELECTOR, OR_ZERO, increase, operator, quantile, rate

JOBS = operator("dpjob_jobs")
RECONCILE_SECONDS = operator("controller_runtime_reconcile_time_seconds_bucket", selector=CONTROLLER_SELECTOR)
RANKS_RUNNING_SECONDS = operator("dpjob_time_to_all_ranks_running_seconds_bucket")
RATE_LIMITER_SECONDS = "rest_client_rate_limiter_duration_seconds"
# controller-runtime's work queue of the DataParallelJob controller.
JOB_QUEUE = 'name="dataparalleljob"'


def _jobs(board: Board) -> None:
    board.row("Jobs")
    board.panel("bargauge", "Jobs by phase", [(f"sum by (phase) ({JOBS})", "{{phase}}")], w=6, h=8,
                decimals=0, description="DataParallelJobs the operator knows, by status.phase.")
    board.panel("timeseries", "Jobs by phase over time", [(f"sum by (phase) ({JOBS})", "{{phase}}")],
                w=6, decimals=0)
    board.panel("timeseries", "Jobs waiting for nodes",
                [(f"sum by (reason) ({operator('dpjob_jobs_unschedulable')})", "{{reason}}")], w=6, decimals=0,
                description="GangUnschedulable: the whole gang does not fit and holds no node (gang scheduling). "
                            "Unschedulable: ranks placed one by one, some waiting while the others hold nodes.")
    board.panel("timeseries", "Phase transitions/s",
                [(f"sum by (phase) ({rate(operator('dpjob_job_transitions_total'))}){OR_ZERO}", "{{phase}}")],
                w=6, unit="ops")


def _reconcile(board: Board) -> None:
    reconciles = operator("controller_runtime_reconcile_total", selector=CONTROLLER_SELECTOR)
    errors = operator("controller_runtime_reconcile_errors_total", selector=CONTROLLER_SELECTOR)
    board.row("Reconcile")
    board.panel("timeseries", "Reconcile rate", [(f"sum by (result) ({rate(reconciles)})", "{{result}}")],
                w=6, unit="ops")
    board.panel("timeseries", "Reconcile errors/s", [(f"sum({rate(errors)}){OR_ZERO}", "errors")],
                w=6, unit="ops", thresholds=[(None, "green"), (0.01, "red")])
    board.panel("timeseries", "Reconcile latency p50 / p99",
                [(quantile(0.5, RECONCILE_SECONDS), "p50"), (quantile(0.99, RECONCILE_SECONDS), "p99")],
                w=6, unit="s")
    board.panel("timeseries", "Work queue",
                [(f"sum({operator('workqueue_depth', JOB_QUEUE)})", "depth"),
                 (f"sum({rate(operator('workqueue_adds_total', JOB_QUEUE))})", "adds/s")], w=6)


def _rank_pods(board: Board) -> None:
    created = operator("dpjob_pods_created_total")
    restarts = operator("dpjob_restarts_total")
    board.row("Rank pods")
    board.panel("timeseries", "Pods created/s",
                [(f"sum({rate(created)})", "created"),
                 (f"sum by (reason) ({rate(operator('dpjob_pods_deleted_total'))}){OR_ZERO}", "deleted {{reason}}")],
                w=8, unit="ops")
    board.panel("timeseries", "Time to all ranks running p50 / p99",
                [(quantile(0.5, RANKS_RUNNING_SECONDS), "running p50"),
                 (quantile(0.99, RANKS_RUNNING_SECONDS), "running p99"),
                 (quantile(0.99, operator("dpjob_time_to_all_pods_created_seconds_bucket")), "all pods created p99")],
                w=8, unit="s",
                description="From a gang's start (job seen or restart decided) to all pods created / all ranks "
                            "Running. Empty when no gang started in the window.")
    board.panel("timeseries", "Gang restarts by reason",
                [(f"sum by (reason) ({increase(restarts)}){OR_ZERO}", "{{reason}}")], w=8, decimals=0)
    board.panel("stat", "Gang restarts (total)", [(f"sum by (reason) ({restarts}){OR_ZERO}", "{{reason}}")],
                w=8, h=5, decimals=0, thresholds=[(None, "green"), (1, "orange")])
    board.panel("stat", "Pods created (total)", [(f"sum({created})", "pods")], w=8, h=5, decimals=0)
    board.panel("stat", "Operator up", [(f"sum({operator('up')})", "up")], w=8, h=5, decimals=0,
                thresholds=[(None, "red"), (1, "green")])
    recover, detect = (operator(f"dpjob_restart_{part}_seconds_bucket") for part in ("recover", "detect"))
    board.panel("timeseries", "Restart recovery p50 / p95 by strategy",
                [(quantile(0.5, recover, by="le, strategy") + OR_ZERO, "recover p50 {{strategy}}"),
                 (quantile(0.95, recover, by="le, strategy") + OR_ZERO, "recover p95 {{strategy}}"),
                 (quantile(0.95, detect, by="le, strategy") + OR_ZERO, "detect p95 {{strategy}}")],
                w=24, unit="s",
                description="From a rank's failure to the new gang's first step (recover) and to the operator "
                            "booking the restart (detect), from status.goodput. A single line at 0: no restart "
                            "recovered in the window.")


def _api_client(board: Board) -> None:
    limiter_buckets, limiter_sum, limiter_count = (operator(f"{RATE_LIMITER_SECONDS}_{part}")
                                                   for part in ("bucket", "sum", "count"))
    board.row("Kubernetes API client")
    board.panel("timeseries", "API requests/s by method and code",
                [(f"sum by (method, code) ({rate(operator('rest_client_requests_total'))})", "{{method}} {{code}}")],
                w=8, unit="reqps")
    board.panel("timeseries", "API latency p99 by verb",
                [(quantile(0.99, operator("rest_client_request_duration_seconds_bucket"), by="le, verb"), "{{verb}}")],
                w=8, unit="s",
                description="How long the API server took to answer the operator. When reconcile time rises with "
                            "this, the API server (or the network to it) is the slow part, not the operator.")
    board.panel("timeseries", "Rate-limiter wait p99 / mean",
                [(f"{quantile(0.99, limiter_buckets)} or vector(0)", "p99"),
                 (f"(sum({rate(limiter_sum)}) / sum({rate(limiter_count)})) or vector(0)", "mean")],
                w=8, unit="s",
                description="Time requests wait for the client-side token bucket, which exists only when apiQPS > 0; "
                            "with the default -1 (API Priority and Fairness decides) nothing waits and this reads 0. "
                            "Sustained waits mean the operator is throttling itself.")


def operator_dashboard() -> dict[str, Any]:
    variables = [
        datasource_variable(),
        # "All" = every scrape job exporting dpjob_jobs, never ".*" (that would sum other controllers).
        query_variable("operator", "Operator scrape job", "label_values(dpjob_jobs, job)", all_value=None),
    ]
    return build_dashboard("dpjob-operator", "dpjob operator",
                           "The DataParallelJob operator: reconciles, rank pods, restarts and API client "
                           "(controller-runtime metric names plus dpjob_*).",
                           ["dpjob", "operator"], variables,
                           [_jobs, _reconcile, _rank_pods, _api_client])
