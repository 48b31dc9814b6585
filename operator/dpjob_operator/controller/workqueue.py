"""The work queue of job keys, with client-go's workqueue semantics, in plain asyncio.

Why each rule:

* **dedup**: a key waiting in the queue is not queued again; ten pod events before a worker
  gets to the job cost one reconcile, not ten (a reconcile reads the whole state anyway).
* **one worker per key**: a key being processed is never handed to a second worker; adding it
  meanwhile marks it *dirty*, and it is queued again the moment its worker is done, so the change
  that arrived mid-pass is still seen.
* **one timer per key**: a delayed add keeps only the earliest due time per key. Every pass asks
  for a resync; without this, timers would stack up with every event and a busy job would be
  reconciled over and over by its own leftover timers.
* **per-key exponential backoff** (client-go's ItemExponentialFailureRateLimiter): the n-th
  consecutive failure of a key waits ``0.5 * 2**n`` s, capped at 60 s; a success resets it. One
  broken job cannot hammer the API server, and the others are not slowed down by it.

Depth and adds are exported as ``workqueue_depth`` / ``workqueue_adds_total``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

from dpjob_operator import metrics

K = TypeVar("K", bound=Hashable)


class ExponentialBackoff(Generic[K]):
    """Per-key failure counts and the delay each one earns."""

    def __init__(self, base_seconds: float = 0.5, max_seconds: float = 60.0) -> None:
        self.base_seconds = base_seconds
        self.max_seconds = max_seconds
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        """Count one more failure of ``key`` and return how long to wait before retrying it."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        return float(min(self.base_seconds * 2 ** failures, self.max_seconds))

    def forget(self, key: K) -> None:
        """The key succeeded (or is gone): its next failure starts from the base delay again."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)


class WorkQueue(Generic[K]):
    """Keys to process. ``get`` -> process -> ``done``; see the module docstring for the rules."""

    def __init__(self, name: str = metrics.CONTROLLER, loop: asyncio.AbstractEventLoop | None = None,
                 backoff: ExponentialBackoff[K] | None = None) -> None:
        self.name = name
        self._loop = loop
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._since: dict[K, float] = {}  # when each active key was taken (liveness)
        self._dirty: set[K] = set()
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._backoff: ExponentialBackoff[K] = backoff or ExponentialBackoff()

    def stuck(self, limit: float) -> str | None:
        """A key held by a worker for over ``limit`` seconds: every API call has a deadline, so a
        pass that long means a wedged worker (liveness then fails and the pod is restarted)."""
        now = time.monotonic()
        held = [(now - t, k) for k, t in self._since.items() if now - t > limit]
        if not held:
            return None
        seconds, key = max(held, key=lambda item: item[0])
        return f"a reconcile of {key} has run for {seconds:.0f}s"

    def __len__(self) -> int:
        """Keys waiting for a worker (not those being processed, not those waiting on a timer)."""
        return self._queue.qsize()

    # ---- adding -------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue ``key`` now, unless it already waits; mark it dirty if a worker holds it."""
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)
        metrics.WORKQUEUE_ADDS.labels(self.name).inc()
        self._export_depth()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds; of this and a timer already set for it, the earlier wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = self._loop or asyncio.get_running_loop()
        due = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None:
            if timer.when() <= due:
                return
            timer.cancel()
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def backoff(self, key: K) -> float:
        """Count a failure of ``key``; the delay to retry it after (the caller decides to add it)."""
        return self._backoff.when(key)

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff (after a success, or when the job is gone)."""
        self._backoff.forget(key)

    def failures(self, key: K) -> int:
        return self._backoff.failures(key)

    def timer_due(self, key: K) -> float | None:
        """When (loop time) the pending timer of ``key`` fires; None without one."""
        timer = self._timers.get(key)
        return None if timer is None else timer.when()

    # ---- processing ------------------------------------------------------------------------

    async def get(self) -> K:
        """The next key; it stays this worker's until ``done``."""
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        self._since[key] = time.monotonic()
        self._export_depth()
        return key

    def done(self, key: K) -> bool:
        """Release ``key``; True when it was added meanwhile and so is queued again right away."""
        self._active.discard(key)
        self._since.pop(key, None)
        if key not in self._dirty:
            return False
        self._dirty.discard(key)
        self.add(key)
        return True

    def shutdown(self) -> None:
        """Cancel every pending timer (the workers are cancelled by their owner)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _export_depth(self) -> None:
        metrics.WORKQUEUE_DEPTH.labels(self.name).set(self._queue.qsize())
