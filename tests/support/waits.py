"""Polling with a deadline: the one wait every test uses, failing with what it waited for.

It is the dev tooling's own wait (devcluster/waits.py): ``wait_until(fn, timeout, interval, what=...)``
returns ``fn``'s first truthy value or raises ``TimedOut``, an AssertionError naming what it waited
for and the last value seen.
"""

from __future__ import annotations

from devcluster.waits import TimedOut, wait_until

__all__ = ["TimedOut", "wait_until"]
