"""The controller's clock: where the executor, the event recorder, the progress reader and the
leader elector read the time, and how they wait.

Each takes a ``Clock`` and, where it waits, a ``Sleep``, defaulting to the system's; tests pass
a fake clock and a sleep they release (``tests/support/clocks.py``), so a memo that expires, a
Lease that runs out or a read that repeats is a step of the test, never a wait on real time.
Timeouts of I/O (an API call, an HTTP read) stay on the event loop's own clock: they bound real
work, not the controller's decisions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

Sleep = Callable[[float], Awaitable[None]]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps: for intervals and deadlines."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch: for what is written down (an Event's time, a report's)."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


SYSTEM_CLOCK: Clock = SystemClock()
SLEEP: Sleep = asyncio.sleep
