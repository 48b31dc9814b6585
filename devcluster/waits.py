"""Polling with a deadline: the one wait of the dev tooling and the tests, failing with what it waited for.

A bare ``assert`` after ``time.sleep`` is either flaky or slow; a wait that times out with
"timed out after 30s waiting for 3 Running pods of train; last value: ..." says what broke.
Standard library only: ``devcluster/cluster.py`` runs before the project's virtual environment exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(AssertionError):
    """A wait ran out of time. An AssertionError, so pytest reports it as the failed expectation."""


def wait_until(predicate: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.25, *, what: str,
               retry_on: tuple[type[Exception], ...] = ()) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value, and return that value.

    Raises :class:`TimedOut` after ``timeout`` seconds, naming ``what`` and the last value seen.
    Exceptions from ``predicate`` propagate (a check that cannot run, e.g. because the operator died,
    is not "not yet"), except those in ``retry_on``, which count as "not yet" (a server still starting).
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except retry_on:
            last = None
        if last:
            return last
        time.sleep(interval)
    raise TimedOut(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
