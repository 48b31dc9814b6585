"""The metric families of one scrape, built from a snapshot of the trainer's counters (metrics.py).

Names, help texts and bucket bounds are the contract with dashboards, alerts and the operator's
progress reader (docs/trainer.md, "Metrics"); ``metrics.METRIC_NAMES`` lists every name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .handshake import WarmCause
from .stragglers import StepTimes

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass(frozen=True)
class Snapshot:
    """The trainer's counters at one instant, copied under its lock."""

    info: dict[str, str] | None
    step_buckets: list[int]
    step_sum: float
    steps: int
    samples: int
    data_wait: float
    comm_exposed: float
    global_samples: int
    # loss, lr, grad norm, epoch, last step timestamp, global step; None before the first step
    gauges: tuple[float, float, float, int, float, int] | None
    total_steps: int | None
    checkpoint: tuple[int, float | None] | None  # step, unix time
    ckpt_buckets: list[int]
    ckpt_sum: float
    nonfinite_steps: int
    step_times: StepTimes | None
    first_step: tuple[int, float] | None = None  # this process's first step: global step, unix time
    warm: tuple[int, WarmCause | None] = (0, None)  # warm restarts before this process; rank 0: their cause


def families(s: Snapshot) -> Iterator[Any]:
    """Every metric family of the snapshot, in exposition order."""
    from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

    if s.info is not None:
        family = GaugeMetricFamily("dpjob_trainer_info", "Constant 1; labels describe this trainer process.",
                                   labels=list(s.info))
        family.add_metric(list(s.info.values()), 1)
        yield family
    yield _histogram(HistogramMetricFamily, "dpjob_trainer_step_duration_seconds",
                     "Wall time of one optimizer step: data, forward/backward of all micro-batches, "
                     "all-reduce, update.",
                     STEP_BUCKETS, s.step_buckets, s.step_sum)
    yield from _counters(s)
    if s.total_steps is not None:
        yield GaugeMetricFamily("dpjob_trainer_total_steps", "Optimizer steps the run takes in total.",
                                value=s.total_steps)
    yield from _checkpoint_gauges(GaugeMetricFamily, s.checkpoint)
    if s.gauges is not None:  # absent until the first step: no fake zero loss, no premature stall clock
        yield from _step_gauges(GaugeMetricFamily, s.gauges)
    if s.first_step is not None:
        yield from _first_step_gauges(GaugeMetricFamily, s.first_step)
    if s.step_times is not None:  # rank 0 of a multi-rank job, after the first steps
        yield from _step_time_gauges(GaugeMetricFamily, s.step_times)
    yield from _warm_gauges(GaugeMetricFamily, *s.warm)
    yield _histogram(HistogramMetricFamily, "dpjob_trainer_checkpoint_duration_seconds",
                     "Time to save a checkpoint, including the wait for rank 0's write.",
                     CHECKPOINT_BUCKETS, s.ckpt_buckets, s.ckpt_sum)


def _counters(s: Snapshot) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily

    yield CounterMetricFamily("dpjob_trainer_steps", "Optimizer steps completed by this process.", value=s.steps)
    yield CounterMetricFamily("dpjob_trainer_samples",
                              "Real (non-padding) samples this rank trained on; sum over ranks for the job.",
                              value=s.samples)
    yield CounterMetricFamily("dpjob_trainer_data_wait_seconds",
                              "Time the loop waited for the next batch from the data loader.", value=s.data_wait)
    yield CounterMetricFamily("dpjob_trainer_comm_exposed_seconds",
                              "Gradient all-reduce time not hidden behind backward compute (see docs/trainer.md).",
                              value=s.comm_exposed)
    yield CounterMetricFamily("dpjob_trainer_global_samples",
                              "Real samples the whole job trained on (every rank's), counted on this rank; "
                              "the operator's status.progress.samplesPerSecond.", value=s.global_samples)
    yield CounterMetricFamily("dpjob_trainer_nonfinite_steps",
                              "Steps skipped (update not applied) because the loss or the reduced gradient "
                              "was NaN or Inf on some rank (--nonfinite skip); included in steps_total.",
                              value=s.nonfinite_steps)


def _step_gauges(cls: Any, gauges: tuple[float, float, float, int, float, int]) -> Iterator[Any]:
    loss, lr, grad_norm, epoch, timestamp, step = gauges
    yield cls("dpjob_trainer_step", "Optimizer steps completed by the job, counting those before a resume.",
              value=step)
    yield cls("dpjob_trainer_loss", "Loss of the last step, averaged over all ranks.", value=loss)
    yield cls("dpjob_trainer_learning_rate", "Learning rate of the last step.", value=lr)
    yield cls("dpjob_trainer_grad_norm", "L2 norm of the reduced gradient of the last step.", value=grad_norm)
    yield cls("dpjob_trainer_epoch", "Epoch (0-based) of the last micro-batch trained.", value=epoch)
    yield cls("dpjob_trainer_last_step_timestamp_seconds",
              "Unix time the last step finished; alert on time() - this to catch hangs.", value=timestamp)


def _first_step_gauges(cls: Any, first: tuple[int, float]) -> Iterator[Any]:
    """The first step of this process: with a resume, where the run picked up, and when it stepped
    again (the operator's status.goodput: recovery time and steps recomputed)."""
    step, timestamp = first
    yield cls("dpjob_trainer_first_step", "Global step of this process's first step (a resume's first step).",
              value=step)
    yield cls("dpjob_trainer_first_step_timestamp_seconds", "Unix time this process finished its first step.",
              value=timestamp)


def _warm_gauges(cls: Any, count: int, cause: WarmCause | None) -> Iterator[Any]:
    """Warm restarts (warm.py): the operator counts them against backoffLimit from rank 0's."""
    yield cls("dpjob_trainer_warm_restarts", "Training processes this container's supervisor restarted before "
              "this one (the container itself did not restart).", value=count)
    if cause is None:
        return
    yield cls("dpjob_trainer_warm_restart_rank", "Rank whose training process ended first before the last warm "
              "restart; served by rank 0.", value=cause.rank)
    yield cls("dpjob_trainer_warm_restart_exit_code", "Exit code of that process (128 + signal when killed).",
              value=cause.exit_code)
    yield cls("dpjob_trainer_warm_restart_failed_timestamp_seconds", "Unix time that process ended.",
              value=cause.failed_at)


def _step_time_gauges(cls: Any, t: StepTimes) -> Iterator[Any]:
    yield cls("dpjob_trainer_slowest_rank", "Rank with the largest own step time (wall time minus time waiting "
              "for the others' gradients) in the last step; served by rank 0.", value=t.slowest_rank)
    yield cls("dpjob_trainer_slowest_rank_ratio", "The slowest rank's own step time over the median of all ranks'.",
              value=t.ratio)
    yield cls("dpjob_trainer_rank_step_seconds_median", "Median over ranks of the own step time.",
              value=t.median_seconds)
    yield cls("dpjob_trainer_straggler_rank", "A rank at >= --straggler-factor x the median own step time for 3 "
              "steps in a row, or -1; the operator's status.progress.slowestRank.",
              value=-1 if t.straggler is None else t.straggler)


def _checkpoint_gauges(cls: Any, ckpt: tuple[int, float | None] | None) -> Iterator[Any]:
    """The last checkpoint's step and time; absent before the first one."""
    if ckpt is None:
        return
    step, timestamp = ckpt
    yield cls("dpjob_trainer_checkpoint_step", "Step of the last checkpoint written or resumed from.", value=step)
    if timestamp is not None:
        yield cls("dpjob_trainer_checkpoint_timestamp_seconds", "Unix time the last checkpoint was written.",
                  value=timestamp)


def _histogram(
    cls: Any, name: str, documentation: str, bounds: tuple[float, ...], counts: list[int], total: float
) -> Any:
    """Per-bucket counts -> Prometheus' cumulative ``le`` buckets."""
    cumulative, running = [], 0
    for bound, count in zip((*bounds, float("inf")), counts, strict=True):
        running += count
        cumulative.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
    return cls(name, documentation, buckets=cumulative, sum_value=total)
