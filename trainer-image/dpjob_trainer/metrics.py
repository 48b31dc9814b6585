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

import signal
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from .handshake import WarmCause
from .metric_families import CHECKPOINT_BUCKETS, STEP_BUCKETS, Snapshot, families
from .stragglers import StepTimes

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
    "dpjob_trainer_first_step",
    "dpjob_trainer_first_step_timestamp_seconds",
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
    # a training process restarted warm in its container (warm.py); the cause on rank 0 (handshake.py)
    "dpjob_trainer_warm_restarts",
    "dpjob_trainer_warm_restart_rank",
    "dpjob_trainer_warm_restart_exit_code",
    "dpjob_trainer_warm_restart_failed_timestamp_seconds",
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

    def set_warm_restarts(self, count: int) -> None:
        pass

    def set_warm_cause(self, cause: WarmCause) -> None:
        pass

    def first_step_time(self) -> float | None:
        """Unix time of this process's first step (None before it, or without metrics)."""
        return None

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
        self._first_step: tuple[int, float] | None = None  # global step, unix time
        self._warm: tuple[int, WarmCause | None] = (0, None)
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
            if self._first_step is None:
                self._first_step = (step, timestamp)

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

    def set_warm_restarts(self, count: int) -> None:
        """This container's warm restarts before this process (warm.py)."""
        with self._lock:
            self._warm = (count, self._warm[1])

    def set_warm_cause(self, cause: WarmCause) -> None:
        """Rank 0: the rank whose process ended first, and how (handshake.py)."""
        with self._lock:
            self._warm = (self._warm[0], cause)

    def first_step_time(self) -> float | None:
        with self._lock:
            return None if self._first_step is None else self._first_step[1]

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
        with self._lock:
            snapshot = Snapshot(
                info=self._info, step_buckets=list(self._step_buckets), step_sum=self._step_sum,
                steps=self._steps, samples=self._samples, data_wait=self._data_wait,
                comm_exposed=self._comm_exposed, global_samples=self._global_samples, gauges=self._gauges,
                total_steps=self._total_steps, checkpoint=self._checkpoint, ckpt_buckets=list(self._ckpt_buckets),
                ckpt_sum=self._ckpt_sum, nonfinite_steps=self._nonfinite_steps, step_times=self._step_times,
                first_step=self._first_step, warm=self._warm,
            )  # fmt: skip
        yield from families(snapshot)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def linger(seconds: float) -> None:
    """Keep the metrics endpoint up after training (``--metrics-linger``, for a final scrape);
    SIGTERM ends it early."""
    stopped: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    deadline = time.monotonic() + seconds
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.05)
