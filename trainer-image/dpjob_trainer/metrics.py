"""Prometheus metrics of one trainer process (design section 8, prefix ``dpjob_trainer_``).

Exposition model: **one endpoint per process** on ``--metrics-port + LOCAL_RANK``, each with its
own registry. We chose this over prometheus-client's multiprocess mode because multiprocess mode
needs ``PROMETHEUS_MULTIPROC_DIR`` set before torchrun forks, a wiped directory on every start,
forbids Info/``set_function`` and needs a merge mode per gauge, whereas per-process endpoints
need nothing but one named container port per local rank, and a hung rank stays visible on its
own target (its ``last_step_timestamp`` stops) instead of being averaged away.

Labels: only ``dpjob_trainer_info`` carries labels (world_size, backend, torch_version, task,
rank, job_name, restart); all bounded. Every other series is label-free, so ``sum()``/``histogram_quantile`` across
targets just work; join on ``info`` to get the rank of a target.

The operator reads rank 0's endpoint for ``status.progress`` and its stall watchdog (docs/api.md,
"Progress reporting"): ``dpjob_trainer_step`` (the global step, resumed steps included),
``dpjob_trainer_total_steps``, ``dpjob_trainer_last_step_timestamp_seconds``, the loss, the
epoch, ``dpjob_trainer_global_samples_total`` and the last checkpoint's step and time. Like the
loss, the step appears only after this process's first step, so a resumed run that has not
stepped yet does not start the operator's stall clock.

``NullMetrics`` has the same interface and does nothing, so ``--metrics-port 0`` costs no
branches in the training loop.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from .stragglers import StepTimes

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

METRIC_NAMES = (
    "dpjob_trainer_info",
    "dpjob_trainer_step_duration_seconds",
    "dpjob_trainer_steps_total",
    "dpjob_trainer_samples_total",
    "dpjob_trainer_data_wait_seconds_total",
    "dpjob_trainer_comm_exposed_seconds_total",
    "dpjob_trainer_loss",
    "dpjob_trainer_learning_rate",
    "dpjob_trainer_grad_norm",
    "dpjob_trainer_epoch",
    "dpjob_trainer_last_step_timestamp_seconds",
    "dpjob_trainer_checkpoint_duration_seconds",
    "dpjob_trainer_step",
    "dpjob_trainer_total_steps",
    "dpjob_trainer_global_samples_total",
    "dpjob_trainer_checkpoint_step",
    "dpjob_trainer_checkpoint_timestamp_seconds",
    "dpjob_trainer_nonfinite_steps_total",
    # rank 0 of a job of two or more ranks (stragglers.py)
    "dpjob_trainer_slowest_rank",
    "dpjob_trainer_slowest_rank_ratio",
    "dpjob_trainer_rank_step_seconds_median",
    "dpjob_trainer_straggler_rank",
)


class NullMetrics:
    """Metrics disabled: every call is a no-op."""

    def set_info(self, **labels: str) -> None:
        pass

    def observe_step(
        self,
        *,
        duration: float,
        samples: int,
        data_wait: float,
        comm_exposed: float,
        loss: float,
        learning_rate: float,
        grad_norm: float,
        epoch: int,
        timestamp: float,
        step: int,
        global_samples: int,
    ) -> None:
        pass

    def observe_checkpoint(self, duration: float) -> None:
        pass

    def observe_nonfinite_step(self) -> None:
        pass

    def set_total_steps(self, total: int) -> None:
        pass

    def set_step_times(self, times: StepTimes) -> None:
        pass

    def set_checkpoint(self, step: int, timestamp: float | None) -> None:
        pass

    def close(self) -> None:
        pass


class TrainerMetrics(NullMetrics):
    """The live metric set: plain fields updated per step, turned into metrics only when scraped.

    prometheus-client's Counter/Gauge/Histogram objects take a lock and do bookkeeping on every
    update: about ten updates per step cost 10-30 us, which is 1-3% of a 1 ms step. Here a step
    costs one bisect and a handful of float additions under one uncontended lock; the metric
    families are built in ``collect()``, i.e. once per scrape (every 15-30 s), off the hot path.
    """

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry
        from prometheus_client.gc_collector import GCCollector
        from prometheus_client.process_collector import ProcessCollector

        self.registry = CollectorRegistry()
        # process_* (RSS, CPU seconds, open fds) is worth having per rank; a private registry keeps
        # tests and the benchmark free to build several instances in one interpreter.
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._lock = threading.Lock()
        self._info: dict[str, str] | None = None
        self._step_buckets = [0] * (len(STEP_BUCKETS) + 1)  # last slot: above the largest bound
        self._step_sum = 0.0
        self._steps = 0
        self._samples = 0
        self._data_wait = 0.0
        self._comm_exposed = 0.0
        self._global_samples = 0
        # loss, lr, grad norm, epoch, last step timestamp, global step
        self._gauges: tuple[float, float, float, int, float, int] | None = None
        self._total_steps: int | None = None
        self._checkpoint: tuple[int, float | None] | None = None  # step, unix time
        self._ckpt_buckets = [0] * (len(CHECKPOINT_BUCKETS) + 1)
        self._ckpt_sum = 0.0
        self._ckpt_count = 0
        self._nonfinite_steps = 0
        self._step_times: StepTimes | None = None
        self._server: Any = None
        self._thread: Any = None
        self.registry.register(self)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Start the HTTP endpoint; raises OSError when the port is taken."""
        from prometheus_client import start_http_server

        result = start_http_server(port, addr=addr, registry=self.registry)
        if isinstance(result, tuple):  # prometheus-client >= 0.17 returns (server, thread)
            self._server, self._thread = result

    def set_info(self, **labels: str) -> None:
        with self._lock:
            self._info = dict(labels)

    def observe_step(
        self,
        *,
        duration: float,
        samples: int,
        data_wait: float,
        comm_exposed: float,
        loss: float,
        learning_rate: float,
        grad_norm: float,
        epoch: int,
        timestamp: float,
        step: int,
        global_samples: int,
    ) -> None:
        bucket = bisect_left(STEP_BUCKETS, duration)  # first bound >= duration: Prometheus "le"
        with self._lock:
            self._step_buckets[bucket] += 1
            self._step_sum += duration
            self._steps += 1
            self._samples += samples
            self._global_samples += global_samples
            self._data_wait += data_wait
            self._comm_exposed += comm_exposed
            self._gauges = (loss, learning_rate, grad_norm, epoch, timestamp, step)

    def set_total_steps(self, total: int) -> None:
        with self._lock:
            self._total_steps = total

    def set_step_times(self, times: StepTimes) -> None:
        """Rank 0: the slowest rank's own step time against the median (stragglers.py)."""
        with self._lock:
            self._step_times = times

    def set_checkpoint(self, step: int, timestamp: float | None) -> None:
        """The last checkpoint written (or resumed from): its step and, if known, its unix time."""
        with self._lock:
            self._checkpoint = (step, timestamp)

    def observe_checkpoint(self, duration: float) -> None:
        bucket = bisect_left(CHECKPOINT_BUCKETS, duration)
        with self._lock:
            self._ckpt_buckets[bucket] += 1
            self._ckpt_sum += duration
            self._ckpt_count += 1

    def observe_nonfinite_step(self) -> None:
        """A step skipped under ``--nonfinite skip`` (it is counted by ``observe_step`` too)."""
        with self._lock:
            self._nonfinite_steps += 1

    def describe(self) -> list[Any]:
        return []  # names are fixed and unique; skip the registry's duplicate check by collect()

    def collect(self) -> Iterator[Any]:
        """Build the metric families from a consistent snapshot (called per scrape)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            info = self._info
            step_buckets, step_sum = list(self._step_buckets), self._step_sum
            steps, samples, data_wait, comm = self._steps, self._samples, self._data_wait, self._comm_exposed
            gauges, global_samples = self._gauges, self._global_samples
            ckpt_buckets, ckpt_sum = list(self._ckpt_buckets), self._ckpt_sum
            total_steps, ckpt = self._total_steps, self._checkpoint
            nonfinite_steps = self._nonfinite_steps
            step_times = self._step_times

        if info is not None:
            family = GaugeMetricFamily("dpjob_trainer_info", "Constant 1; labels describe this trainer process.",
                                       labels=list(info))
            family.add_metric(list(info.values()), 1)
            yield family
        yield _histogram(HistogramMetricFamily, "dpjob_trainer_step_duration_seconds",
                         "Wall time of one optimizer step: data, forward/backward of all micro-batches, "
                         "all-reduce, update.",
                         STEP_BUCKETS, step_buckets, step_sum)
        yield CounterMetricFamily("dpjob_trainer_steps", "Optimizer steps completed by this process.", value=steps)
        yield CounterMetricFamily("dpjob_trainer_samples",
                                  "Real (non-padding) samples this rank trained on; sum over ranks for the job.",
                                  value=samples)
        yield CounterMetricFamily("dpjob_trainer_data_wait_seconds",
                                  "Time the loop waited for the next batch from the data loader.", value=data_wait)
        yield CounterMetricFamily("dpjob_trainer_comm_exposed_seconds",
                                  "Gradient all-reduce time not hidden behind backward compute (see docs/trainer.md).",
                                  value=comm)
        yield CounterMetricFamily("dpjob_trainer_global_samples",
                                  "Real samples the whole job trained on (every rank's), counted on this rank; "
                                  "the operator's status.progress.samplesPerSecond.", value=global_samples)
        yield CounterMetricFamily("dpjob_trainer_nonfinite_steps",
                                  "Steps skipped (update not applied) because the loss or the reduced gradient "
                                  "was NaN or Inf on some rank (--nonfinite skip); included in steps_total.",
                                  value=nonfinite_steps)
        if total_steps is not None:
            yield GaugeMetricFamily("dpjob_trainer_total_steps", "Optimizer steps the run takes in total.",
                                    value=total_steps)
        yield from _checkpoint_gauges(GaugeMetricFamily, ckpt)
        if gauges is not None:  # absent until the first step: no fake zero loss, no premature stall clock
            loss, lr, grad_norm, epoch, timestamp, step = gauges
            yield GaugeMetricFamily("dpjob_trainer_step",
                                    "Optimizer steps completed by the job, counting those before a resume.",
                                    value=step)
            yield GaugeMetricFamily("dpjob_trainer_loss", "Loss of the last step, averaged over all ranks.", value=loss)
            yield GaugeMetricFamily("dpjob_trainer_learning_rate", "Learning rate of the last step.", value=lr)
            yield GaugeMetricFamily("dpjob_trainer_grad_norm", "L2 norm of the reduced gradient of the last step.",
                                    value=grad_norm)
            yield GaugeMetricFamily("dpjob_trainer_epoch", "Epoch (0-based) of the last micro-batch trained.",
                                    value=epoch)
            yield GaugeMetricFamily("dpjob_trainer_last_step_timestamp_seconds",
                                    "Unix time the last step finished; alert on time() - this to catch hangs.",
                                    value=timestamp)
        if step_times is not None:  # rank 0 of a multi-rank job, after the first steps
            yield from _step_time_gauges(GaugeMetricFamily, step_times)
        yield _histogram(HistogramMetricFamily, "dpjob_trainer_checkpoint_duration_seconds",
                         "Time to save a checkpoint, including the wait for rank 0's write.",
                         CHECKPOINT_BUCKETS, ckpt_buckets, ckpt_sum)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


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
