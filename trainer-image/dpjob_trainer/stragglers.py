"""Straggler detection: which rank holds the gang back, from every rank's own step time.

Under DDP every rank steps in lockstep, so wall time per step is the same everywhere and says
nothing about who is slow. What differs is each rank's *own* time: the step's wall time minus
the time it spent blocked waiting for the others' gradients (``CommHook``'s exposed time). A slow
rank (a throttled GPU, a noisy neighbour, a slow disk) has the largest own time; the others wait
for it. Every rank puts its own time of the previous step into the step's existing all-reduce
(one float per rank), so all ranks learn every rank's time without another collective; rank 0
feeds them here and exports the verdict, which the operator reads with the rest of the progress.

A rank is a straggler when its own time is at least ``factor`` x the median of the ranks' for
``window`` consecutive steps: one slow step (a GC pause, a checkpoint) is not a straggler. It
must also be at least ``MIN_GAP_SECONDS`` behind the median: with millisecond steps, scheduler
noise alone makes ratios of 1.5 and costs nothing worth reporting.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_FACTOR = 1.5
DEFAULT_WINDOW = 3
MIN_GAP_SECONDS = 0.005


@dataclass(frozen=True)
class StepTimes:
    """One step's verdict: the slowest rank, its own time and the median of all ranks' own times."""

    slowest_rank: int
    slowest_seconds: float
    median_seconds: float
    straggler: int | None  # the rank that has been >= factor x the median for `window` steps, if any

    @property
    def ratio(self) -> float:
        return self.slowest_seconds / self.median_seconds if self.median_seconds > 0 else 1.0


class StragglerDetector:
    def __init__(self, factor: float = DEFAULT_FACTOR, window: int = DEFAULT_WINDOW) -> None:
        if factor <= 1.0 or window < 1:
            raise ValueError(f"straggler factor must be > 1 and window >= 1, got {factor} and {window}")
        self.factor, self.window = factor, window
        self._candidate: int | None = None
        self._streak = 0

    def observe(self, own_seconds: Sequence[float]) -> StepTimes | None:
        """Feed one step's own times (index = rank); None until every rank has reported one."""
        if len(own_seconds) < 2 or any(t <= 0 for t in own_seconds):
            return None
        median = statistics.median(own_seconds)
        slowest = max(range(len(own_seconds)), key=lambda r: own_seconds[r])
        if own_seconds[slowest] >= self.factor * median and own_seconds[slowest] - median >= MIN_GAP_SECONDS:
            self._streak = self._streak + 1 if slowest == self._candidate else 1
            self._candidate = slowest
        else:
            self._candidate, self._streak = None, 0
        straggler = self._candidate if self._streak >= self.window else None
        return StepTimes(slowest, own_seconds[slowest], median, straggler)
