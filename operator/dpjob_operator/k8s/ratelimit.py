"""A thread-safe token bucket: the client-side rate limit the Python Kubernetes client lacks.

client-go gives every controller a QPS/burst limiter; without one a Python operator creating a
1,000-rank gang relies on the API server's 429s alone. Waits are reported to a callback so the
``rest_client_rate_limiter_duration_seconds`` histogram shows when the limit bites.
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
