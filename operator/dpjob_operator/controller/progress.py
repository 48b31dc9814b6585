"""Reading rank 0's metrics endpoint: the I/O half of ``status.progress`` and the stall watchdog.

Why this channel (docs/api.md, "Progress reporting"): every rank pod already serves Prometheus
metrics, so the operator reads the one pod that speaks for the gang (rank 0: DDP ranks step in
lockstep) with one HTTP GET per job every ``PROGRESS_SECONDS``. That is independent of the
number of ranks, needs no RBAC, ServiceAccount token or report endpoint in any pod, and works
for any trainer that serves a gauge named ``dpjob_trainer_step``.

Each watched job has its own small asyncio loop here, off the reconcile workers: a slow or
unreachable pod costs a pending read (at most ``READ_TIMEOUT_SECONDS``), never a worker, a
thread or an error of a pass. A read that shows a new step enqueues the job; the pass then
takes the current ``ProgressView`` from ``watch``. Reads speak HTTP/1.0 so that the answer is
never chunked and ends when the server closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from dpjob_operator import metrics
from dpjob_operator.api.progress import (
    CONTRACT,
    INFO,
    PREFIX,
    PROGRESS_SECONDS,
    ProgressView,
    advance,
    refusal,
    report_from_samples,
)
from dpjob_operator.controller.clock import SLEEP, SYSTEM_CLOCK, Clock, Sleep

log = logging.getLogger("dpjob.progress")
JobKey = tuple[str, str]
READ_TIMEOUT_SECONDS = 2.0
MAX_RESPONSE_BYTES = 4 << 20  # a trainer's page is ~10 KiB; a user's exporter may hold much more


@dataclass(frozen=True)
class Target:
    """Rank 0 of gang ``restart`` of job ``key``: where to read, and whom the answer must name."""

    key: JobKey
    job_name: str
    restart: int
    host: str
    port: int


@dataclass
class _Watch:
    target: Target
    view: ProgressView
    last_read: float | None = None
    refused: str | None = None  # the refusal last logged: said once, not every read
    task: asyncio.Task[None] | None = None


class ProgressReader:
    """Reads the rank 0 of every Running job every ``period`` seconds; ``on_step(key)`` on a new step.
    Reports are stamped with ``clock``'s wall time; ``sleep`` waits out each period."""

    def __init__(self, on_step: Callable[[JobKey], None], period: float = PROGRESS_SECONDS,
                 timeout: float = READ_TIMEOUT_SECONDS, clock: Clock = SYSTEM_CLOCK, sleep: Sleep = SLEEP) -> None:
        self._on_step = on_step
        self._period = period
        self._timeout = timeout
        self._clock = clock
        self._sleep = sleep
        self._watches: dict[str, _Watch] = {}  # by job uid

    def watch(self, uid: str, target: Target | None) -> ProgressView | None:
        """Read ``target`` from now on (None: stop reading the job); the view of its gang so far."""
        if target is None:
            self.forget(uid)
            return None
        watch = self._watches.get(uid)
        if watch is None or watch.target.restart != target.restart:
            self.forget(uid)  # a new gang starts a new view: nothing of the old one carries over
            watch = self._watches[uid] = _Watch(target, ProgressView(target.restart, self._clock.time()))
            watch.task = asyncio.get_running_loop().create_task(self._loop(uid), name=f"progress-{uid}")
        elif watch.target != target:
            watch.target = target  # the same gang's rank 0 at a new address (a pod IP seen late)
        return watch.view

    def forget(self, uid: str) -> None:
        """Stop reading a job (finished, suspended, restarting or deleted) and drop what was read."""
        watch = self._watches.pop(uid, None)
        if watch is not None and watch.task is not None:
            watch.task.cancel()

    def stop(self) -> None:
        for uid in list(self._watches):
            self.forget(uid)

    async def _loop(self, uid: str) -> None:
        while (watch := self._watches.get(uid)) is not None:
            try:
                await self._read(uid, watch.target)
            except Exception:  # a report is best effort: never let one job's reader die
                log.exception("reading the progress of %s/%s failed", *watch.target.key)
            await self._sleep(self._period)

    async def _read(self, uid: str, target: Target) -> None:
        text = await fetch_metrics(target.host, target.port, self._timeout)
        observed_at = self._clock.time()
        watch = self._watches.get(uid)
        if watch is None or watch.target.restart != target.restart:
            return  # the gang restarted while the read was in flight: its answer is of no use
        if text is None:
            metrics.PROGRESS_READS.labels("unreachable").inc()
            return
        parsed = parse_contract(text)
        if parsed is None:
            metrics.PROGRESS_READS.labels("invalid").inc()
            return
        values, info = parsed
        why = refusal(info, target.job_name, target.restart)
        if why is not None:
            metrics.PROGRESS_READS.labels("refused").inc()
            if why != watch.refused:
                log.warning("refused the progress report of %s/%s from %s:%d: %s", *target.key, target.host,
                            target.port, why)
            watch.refused = why
            return
        since, watch.last_read = watch.last_read, observed_at
        report = report_from_samples(values, target.restart, observed_at, since)
        metrics.PROGRESS_READS.labels("ok" if report is not None else "no_step").inc()
        if report is None:
            return
        before = watch.view.latest
        watch.view = advance(watch.view, report)
        if before is None or before.step != report.step or before.checkpoint_step != report.checkpoint_step \
                or before.warm_restarts != report.warm_restarts:
            self._on_step(target.key)


def parse_contract(text: str) -> tuple[dict[str, float], dict[str, str]] | None:
    """The contract's label-free samples and the labels of ``dpjob_trainer_info``; None for text
    that is not the Prometheus exposition format. Only ``dpjob_trainer_*`` lines are parsed."""
    lines = "\n".join(line for line in text.splitlines() if line.startswith(PREFIX))
    values: dict[str, float] = {}
    info: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(lines + "\n"):
            for sample in family.samples:
                if sample.name == INFO and not info:
                    info = dict(sample.labels)
                elif sample.name in CONTRACT and sample.name not in values:
                    values[sample.name] = float(sample.value)
    except (ValueError, TypeError, IndexError):
        return None
    return values, info


async def fetch_metrics(host: str, port: int, timeout: float) -> str | None:
    """The body of ``GET http://host:port/metrics``, or None (refused, slow, not 200, too large)."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            writer.write(f"GET /metrics HTTP/1.0\r\nHost: {address}\r\nAccept: text/plain\r\n\r\n".encode())
            await writer.drain()
            raw = bytearray()
            while chunk := await reader.read(65536):
                raw += chunk
                if len(raw) > MAX_RESPONSE_BYTES:
                    return None
    except (OSError, TimeoutError, ValueError):
        return None
    finally:
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
    head, sep, body = bytes(raw).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or status[1] != b"200" or b"transfer-encoding: chunked" in head.lower():
        return None
    return body.decode("utf-8", errors="replace")

