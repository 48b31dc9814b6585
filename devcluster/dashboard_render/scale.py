"""Axis arithmetic: the value range a plot shows, "nice" ticks (1, 2, 5 times a power of ten) and
time ticks on round minutes, labelled in UTC so that a picture does not depend on where it is drawn."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

_NICE = (1.0, 2.0, 2.5, 5.0, 10.0)
# Time-tick steps in seconds, from 1 s to a day.
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


@dataclass(frozen=True)
class Range:
    """A closed interval ``lo..hi`` with ``hi > lo``."""

    lo: float
    hi: float

    def fraction(self, value: float) -> float:
        """Where ``value`` lies, 0 at ``lo`` and 1 at ``hi``."""
        return (value - self.lo) / (self.hi - self.lo)


def nice_step(span: float, max_ticks: int) -> float:
    """The smallest 1/2/2.5/5 x 10^k step that cuts ``span`` into at most ``max_ticks`` intervals."""
    raw = span / max(1, max_ticks)
    power = 10.0 ** math.floor(math.log10(raw))
    return next(n * power for n in _NICE if n * power >= raw * (1 - 1e-9))


def value_range(values: Iterable[float], lo: float | None = None, hi: float | None = None,
                max_ticks: int = 5) -> Range:
    """The y range of a plot: the data's extent widened to nice steps, starting at zero when all
    values are positive (as Grafana's soft minimum does for counts and rates); ``lo``/``hi`` are
    the panel's fixed min/max. A flat or empty series gets a unit range around its value."""
    data = list(values)
    low = lo if lo is not None else min([0.0, *data])
    high = hi if hi is not None else max(data, default=1.0)
    if high <= low:
        high = low + (abs(low) or 1.0)
    step = nice_step(high - low, max_ticks)
    if lo is None:
        low = math.floor(low / step + 1e-9) * step
    if hi is None:
        high = math.ceil(high / step - 1e-9) * step
    return Range(low, high)


def ticks(span: Range, max_ticks: int = 5) -> list[float]:
    """Nice tick values inside ``span``, rounded so that 0.1 + 0.2 prints as 0.3."""
    step = nice_step(span.hi - span.lo, max_ticks)
    first = math.ceil(span.lo / step - 1e-9)
    count = math.floor(span.hi / step + 1e-9) - first + 1
    return [round((first + i) * step, 12) for i in range(max(0, count))]


def time_ticks(span: Range, max_ticks: int = 6) -> list[float]:
    """Tick times on round seconds, minutes or hours, at most ``max_ticks`` of them."""
    duration = span.hi - span.lo
    step = next((s for s in _TIME_STEPS if duration / s <= max_ticks), _TIME_STEPS[-1])
    first = math.ceil(span.lo / step) * step
    return [float(t) for t in range(int(first), int(span.hi) + 1, step)]


def time_label(t: float, span: Range) -> str:
    """``HH:MM`` in UTC, with seconds when the window is shorter than ten minutes."""
    fmt = "%H:%M:%S" if span.hi - span.lo < 600 else "%H:%M"
    return time.strftime(fmt, time.gmtime(t))
