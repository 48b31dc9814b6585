"""A clock the test moves and a sleep the test releases, for the controller's parts that take a
``Clock`` and a ``Sleep`` (operator/dpjob_operator/controller/clock.py).

client-go's tests do the same with ``k8s.io/utils/clock/testing``: time passes when the test says
so, and a loop that waits is parked until the test lets it go. A test then never sleeps and
hopes; it says "ten seconds pass" (``FakeClock.advance``) or "the next retry is due"
(``ManualSleep.release``), and waits only on signals (``ManualSleep.parked``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

START = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    """Monotonic and wall time that move together, and only on ``advance``."""

    def __init__(self, start: datetime = START, monotonic: float = 1000.0) -> None:
        self._wall = start
        self._monotonic = monotonic

    def monotonic(self) -> float:
        return self._monotonic

    def time(self) -> float:
        return self._wall.timestamp()

    def now(self) -> datetime:
        return self._wall

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go back, got {seconds}")
        self._monotonic += seconds
        self._wall += timedelta(seconds=seconds)


class ManualSleep:
    """An ``async`` sleep that returns when the test calls ``release``, not when time has passed.

    Given a ``FakeClock``, ``release`` first moves it forward by the longest sleep it wakes, so
    whoever slept sees that time has passed. ``slept`` lists every duration asked for, in order.
    """

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock
        self.slept: list[float] = []
        self._parked: list[tuple[float, asyncio.Future[None]]] = []
        self._watchers: list[asyncio.Future[None]] = []

    async def __call__(self, seconds: float) -> None:
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.slept.append(seconds)
        self._parked.append((seconds, wake))
        for watcher in self._watchers:
            if not watcher.done():
                watcher.set_result(None)
        self._watchers.clear()
        try:
            await wake
        finally:
            self._parked = [(s, f) for s, f in self._parked if f is not wake]  # a cancelled sleeper leaves

    @property
    def sleeping(self) -> int:
        """How many sleepers are parked now."""
        return len(self._parked)

    async def parked(self, count: int = 1) -> None:
        """Return once at least ``count`` sleepers are parked (a signal, not a timed wait)."""
        while len(self._parked) < count:
            watcher: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._watchers.append(watcher)
            await watcher

    def release(self) -> int:
        """Wake every parked sleeper (after moving the clock, if any); how many were woken."""
        parked, self._parked = self._parked, []
        if self.clock is not None and parked:
            self.clock.advance(max(seconds for seconds, _ in parked))
        for _, wake in parked:
            if not wake.done():
                wake.set_result(None)
        return len(parked)

    async def step(self) -> None:
        """Wake the parked sleepers and return once one is parked again: one more turn of a loop."""
        self.release()
        await self.parked()


class FakeTimer:
    """What ``FakeTimers.call_at`` returns: ``asyncio.TimerHandle``'s ``when`` and ``cancel``."""

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[object, ...]) -> None:
        self._when, self._callback, self._args = when, callback, args
        self.cancelled = self.fired = False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        self.fired = True
        self._callback(*self._args)


class FakeTimers:
    """The timer half of an event loop (``time``, ``call_at``, ``call_later``) on a ``FakeClock``,
    for code that is handed a loop to schedule on (the work queue): timers fire only on ``advance``,
    in order of due time, so "which timer fired, and when" is exact."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self._timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.clock.monotonic()

    def call_at(self, when: float, callback: Callable[..., object], *args: object) -> FakeTimer:
        timer = FakeTimer(when, callback, args)
        self._timers.append(timer)
        return timer

    def call_later(self, delay: float, callback: Callable[..., object], *args: object) -> FakeTimer:
        return self.call_at(self.time() + delay, callback, *args)

    @property
    def pending(self) -> int:
        """Timers neither cancelled nor fired."""
        return sum(1 for t in self._timers if not (t.cancelled or t.fired))

    def advance(self, seconds: float) -> int:
        """Move the clock; fire every timer now due (also those the callbacks set); how many fired."""
        self.clock.advance(seconds)
        fired = 0
        while due := sorted((t for t in self._timers if not (t.cancelled or t.fired) and t.when() <= self.time()),
                            key=FakeTimer.when):
            due[0].fire()
            fired += 1
        return fired
