"""The training dashboard (dpjob-training.json): health, throughput, efficiency and model signals of
the trainers' ``dpjob_trainer_*`` series, one function per row."""

from __future__ import annotations

from typing import Any

from panels import Board, build_dashboard, datasource_variable, query_variable
from promql import OR_ZERO, PER_JOB_LEGEND, PER_RANK_LEGEND, per_rank, quantile, rate, trainer

STEP_SUM = trainer("dpjob_trainer_step_duration_seconds_sum")
STEP_COUNT = trainer("dpjob_trainer_step_duration_seconds_count")
DATA_WAIT = trainer("dpjob_trainer_data_wait_seconds_total")
COMM_EXPOSED = trainer("dpjob_trainer_comm_exposed_seconds_total")
# Prometheus' own ``up`` of the trainer targets (a series without dpjob_job is not a rank).
RANKS_UP = trainer("up", 'dpjob_job!=""')
# Mean step time of each rank, and the share of it one rank spent waiting for its data loader.
RANK_MEAN_STEP = f"{rate(STEP_SUM)} / {rate(STEP_COUNT)}"
RANK_DATA_WAIT_SHARE = f"{rate(DATA_WAIT)} / {rate(STEP_SUM)}"


def _per_job(metric: str) -> list[tuple[str, str]]:
    """The largest value of a trainer gauge in each job (the ranks report the same one)."""
    return [(f"max by (namespace, dpjob_job) ({trainer(metric)})", PER_JOB_LEGEND)]


def _share_of_step_time(seconds_total: str) -> list[tuple[str, str]]:
    """The share of step time spent in ``seconds_total``, over all ranks and on the worst rank."""
    return [(f"sum({rate(seconds_total)}) / sum({rate(STEP_SUM)})", "all ranks"),
            (f"max({rate(seconds_total)} / {rate(STEP_SUM)})", "worst rank")]


def _job_health(board: Board) -> None:
    board.row("Job health")
    board.panel("stat", "Ranks reporting", [(f"count({trainer('dpjob_trainer_info')})", "ranks")], w=4, h=5,
                description="Trainer processes whose /metrics endpoint is scraped (dpjob_trainer_info).")
    board.panel("stat", "World size",
                [(f"count by (world_size) ({trainer('dpjob_trainer_info')})", "{{world_size}}")],
                w=4, h=5, options={"textMode": "name", "graphMode": "none"},
                description="WORLD_SIZE reported by the trainers; compare with ranks reporting.")
    board.panel("stat", "Ranks down", [(f"count({RANKS_UP} == 0){OR_ZERO}", "down")],
                w=4, h=5, thresholds=[(None, "green"), (1, "red")],
                description="Trainer targets Prometheus cannot scrape (crashed, OOM-killed or not yet started).")
    board.panel("stat", "Seconds since last step (slowest rank)",
                [(f"time() - min({trainer('dpjob_trainer_last_step_timestamp_seconds')})", "age")], w=4, h=5,
                unit="s", thresholds=[(None, "green"), (120, "orange"), (600, "red")],
                description="A growing value means a hung rank (a collective waiting for a peer, a stuck loader).")
    board.panel("stat", "Steps/s", [(f"avg({rate(trainer('dpjob_trainer_steps_total'))})", "steps/s")], w=4, h=5,
                unit="ops", description="Optimizer steps per second (ranks step in lockstep, averaged).")
    board.panel("stat", "Samples/s", [(f"sum({rate(trainer('dpjob_trainer_samples_total'))})", "samples/s")],
                w=4, h=5, unit="short", description="Real samples per second summed over all ranks.")
    board.panel("timeseries", "Seconds since last step, per rank",
                [(per_rank(f"(time() - {trainer('dpjob_trainer_last_step_timestamp_seconds')})"), PER_RANK_LEGEND)],
                w=24, h=7, unit="s", description="Time since each rank finished its last step.")


def _throughput(board: Board) -> None:
    buckets = trainer("dpjob_trainer_step_duration_seconds_bucket")
    board.row("Throughput")
    board.panel("timeseries", "Throughput (samples/s)",
                [(f"sum by (namespace, dpjob_job) ({rate(trainer('dpjob_trainer_samples_total'))})",
                  PER_JOB_LEGEND)], w=8, unit="short",
                description="Samples per second, summed over the ranks of each job.")
    board.panel("timeseries", "Step time p50 / p99",
                [(quantile(0.5, buckets), "p50"), (quantile(0.99, buckets), "p99"),
                 (f"sum({rate(STEP_SUM)}) / sum({rate(STEP_COUNT)})", "mean")],
                w=8, unit="s", description="Wall time of one optimizer step over all selected ranks.")
    board.panel("timeseries", "Steps/s per rank",
                [(per_rank(rate(trainer("dpjob_trainer_steps_total"))), PER_RANK_LEGEND)], w=8, unit="ops")


def _efficiency(board: Board) -> None:
    board.row("Efficiency")
    board.panel("timeseries", "Data-wait ratio", _share_of_step_time(DATA_WAIT),
                w=8, unit="percentunit", min_=0, thresholds=[(None, "green"), (0.1, "orange"), (0.3, "red")],
                description="Share of step time spent waiting for the data loader. Above ~10%: more workers, "
                            "pinned memory, faster storage.")
    board.panel("timeseries", "Exposed-communication ratio", _share_of_step_time(COMM_EXPOSED),
                w=8, unit="percentunit", min_=0,
                description="Share of step time spent in gradient all-reduce not hidden behind backward compute.")
    board.panel("timeseries", "Per-rank skew (max - min)",
                [(f"max({RANK_MEAN_STEP}) - min({RANK_MEAN_STEP})", "mean step time skew"),
                 (f"max({rate(DATA_WAIT)}) - min({rate(DATA_WAIT)})", "data-wait s/s skew")],
                w=8, unit="s",
                description="Difference between the slowest and the fastest rank. A straggler shows as a step time "
                            "skew; the others then wait in the all-reduce (their exposed communication rises).")
    board.panel("timeseries", "Mean step time per rank", [(per_rank(f"({RANK_MEAN_STEP})"), PER_RANK_LEGEND)],
                w=12, unit="s")
    board.panel("timeseries", "Data-wait ratio per rank",
                [(per_rank(f"({RANK_DATA_WAIT_SHARE})"), PER_RANK_LEGEND)], w=12, unit="percentunit", min_=0)
    board.panel("timeseries", "Slowest rank: own step time / median", _per_job("dpjob_trainer_slowest_rank_ratio"),
                w=12, unit="short", min_=1, thresholds=[(None, "green"), (1.5, "orange"), (3, "red")],
                description="Rank 0's view: the slowest rank's own step time (wall time minus waiting for the "
                            "others' gradients) over the median of all ranks'. 1 means even; the operator reports "
                            "a straggler at runPolicy.stragglerFactor (1.5) for 3 steps in a row.")
    board.panel("stat", "Straggler rank", _per_job("dpjob_trainer_straggler_rank"),
                w=12, decimals=0, thresholds=[(None, "green"), (0, "orange")],
                description="The rank holding the gang back (status.progress.slowestRank), or -1 when none.",
                options={"graphMode": "none"})


def _model(board: Board) -> None:
    board.row("Model")
    board.panel("timeseries", "Loss", _per_job("dpjob_trainer_loss"), w=8,
                description="Loss of the last step, averaged over all ranks by the trainer.")
    board.panel("timeseries", "Learning rate", _per_job("dpjob_trainer_learning_rate"), w=8)
    board.panel("timeseries", "Gradient norm", _per_job("dpjob_trainer_grad_norm"), w=8,
                description="L2 norm of the reduced gradient; spikes precede loss divergence.")
    board.panel("timeseries", "Epoch", _per_job("dpjob_trainer_epoch"), w=12, decimals=0)
    board.panel("timeseries", "Checkpoint save time p99",
                [(quantile(0.99, trainer("dpjob_trainer_checkpoint_duration_seconds_bucket")), "p99")],
                w=12, unit="s", description="Empty between checkpoints (no saves in the window).")


def training_dashboard() -> dict[str, Any]:
    variables = [
        datasource_variable(),
        query_variable("namespace", "Namespace", "label_values(dpjob_trainer_info, namespace)"),
        query_variable("job", "Job", 'label_values(dpjob_trainer_info{namespace=~"$namespace"}, dpjob_job)'),
    ]
    return build_dashboard("dpjob-training", "DataParallelJob training",
                           "Health, throughput, efficiency and model signals of DataParallelJob trainers "
                           "(dpjob_trainer_* metrics scraped by the chart's PodMonitor).",
                           ["dpjob", "training", "ddp"], variables,
                           [_job_health, _throughput, _efficiency, _model])
