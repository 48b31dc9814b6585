"""Polling with a deadline: the one wait every test uses, failing with what it waited for.

A bare ``assert`` after ``time.sleep`` is either flaky or slow; a wait that times out with
"timed out after 30s waiting for 3 Running pods of train; last value: ..." says what broke.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.25, *, what: str) -> T:
    """Call ``fn`` every ``interval`` seconds until it returns a truthy value, and return that value.

    Fails after ``timeout`` seconds with an AssertionError naming ``what`` and the last value seen.
    Exceptions from ``fn`` propagate: a check that cannot run (the operator died) is not "not yet".
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
