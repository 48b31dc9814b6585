"""An optional client-side rate limit (a thread-safe token bucket) and the 429 retry rule.

Off by default (``apiQPS <= 0``), as in controller-runtime since v0.21 (PR #3119, on SIG API
Machinery's advice): the API server's Priority and Fairness shares it between clients by
concurrency and answers 429 with Retry-After when a priority level is full, which ``retry_after``
honours. A fixed QPS was dpjob's cap at scale: 200 jobs at once waited on its own 100/s bucket
(bench/compare.py). An admin who wants a ceiling anyway sets ``apiQPS``/``apiBurst``;
waits are then reported to a callback so ``rest_client_rate_limiter_duration_seconds`` shows
when it bites.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping


class TokenBucket:
    def __init__(self, qps: float, burst: int, on_wait: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()
        self._on_wait = on_wait

    def _reserve(self) -> float:
        """Take one token (possibly going negative) and return how long the caller must wait."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> float:
        wait = self._reserve()
        if wait > 0:
            self._sleep(wait)
        if self._on_wait is not None:
            self._on_wait(wait)
        return wait


def limiter(qps: float, burst: int) -> TokenBucket | None:
    """The bucket for ``apiQPS``/``apiBurst``; None (no client-side limit) when qps <= 0."""
    return TokenBucket(qps, burst) if qps > 0 else None


# How often one call follows a 429's Retry-After before giving up to the worker's backoff.
MAX_THROTTLED_RETRIES = 5
MAX_RETRY_AFTER_SECONDS = 10.0


def retry_after(status: int | None, headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait before retrying a throttled call (429), from its Retry-After header.

    None for anything that is not a 429. A missing or unreadable header means 1 s (client-go's
    default); a huge one is capped so a worker is never parked for minutes on one call.
    """
    if status != 429:
        return None
    raw = next((v for k, v in (headers or {}).items() if k.lower() == "retry-after"), None)
    try:
        seconds = float(raw) if raw is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)
