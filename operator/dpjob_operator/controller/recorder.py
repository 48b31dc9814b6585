"""Events go out behind the pass, as client-go's EventRecorder sends them.

An Event is a note for people (``kubectl describe``), not state anyone acts on, so client-go
records it into a buffered channel and a goroutine sends it; a full buffer drops the event rather
than block the controller. This does the same, and a pass that changes a phase costs no extra API
round trip (under a busy API server that round trip would be a good part of a pass's p99):
``record`` only queues (after the status write, so an Event never announces what the status does
not say, and before the actions, so a failing action cannot lose it).

Order: each job's events go through one sender (chosen by the job's UID), so they are POSTed in
the order they were decided; they carry the time they were recorded (on the recorder's clock),
not the time they were sent. Dropped events are counted (``dpjob_events_dropped_total``).
"""
from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dpjob_operator import metrics
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.clock import SYSTEM_CLOCK, Clock
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.actions import Event

log = logging.getLogger("dpjob.controller")

CAPACITY = 1000  # per sender; client-go's broadcaster buffers 1,000 events
SENDERS = 4

Pending = tuple[dict[str, Any], Event, datetime]


class EventRecorder:
    def __init__(self, kube: KubeClient, blocking: Blocking, senders: int = SENDERS,
                 capacity: int = CAPACITY, clock: Clock = SYSTEM_CLOCK) -> None:
        self.kube = kube
        self.blocking = blocking
        self._clock = clock
        self._queues: list[asyncio.Queue[Pending]] = [asyncio.Queue(capacity) for _ in range(senders)]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._send(q)) for q in self._queues]

    def record(self, job: Mapping[str, Any], events: Sequence[Event]) -> None:
        """Queue ``events`` about ``job`` (a DataParallelJob body); never waits."""
        if not events:
            return
        meta = job.get("metadata") or {}
        # What the Event names, copied now: the body may be replaced before the event goes out.
        about = {"metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")}}
        queue = self._queues[zlib.crc32(str(meta.get("uid") or meta.get("name")).encode()) % len(self._queues)]
        now = datetime.fromtimestamp(self._clock.time(), UTC)
        for event in events:
            try:
                queue.put_nowait((about, event, now))
            except asyncio.QueueFull:
                metrics.EVENTS_DROPPED.inc()
                log.warning("event buffer full: dropped %s %s on %s/%s", event.type, event.reason,
                            meta.get("namespace"), meta.get("name"))

    async def _send(self, queue: asyncio.Queue[Pending]) -> None:
        while True:
            about, event, at = await queue.get()
            try:
                await self.blocking.run(self.kube.post_event, about, event.type, event.reason, event.message, at)
            except Exception as e:  # noqa: BLE001 - a lost note must not stop the sender (post_event logs API errors)
                log.warning("could not post event %s: %s", event.reason, e)
            finally:
                queue.task_done()

    async def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every queued event is sent; False if some are not."""
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(q.join() for q in self._queues))
        except TimeoutError:
            return False
        return True

    def stop(self) -> None:
        """Stop sending, for good (leadership lost): what is still queued is dropped."""
        for task in self._tasks:
            task.cancel()
        for queue in self._queues:
            while not queue.empty():
                queue.get_nowait()
                queue.task_done()
