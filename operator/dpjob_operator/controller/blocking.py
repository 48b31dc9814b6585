"""Blocking client calls, run off the event loop in one thread pool, with bounded fan-out.

The official Kubernetes client is synchronous. Run on the loop, one slow call would stall every
job; run in the default executor, a 1,000-rank creation would queue behind (or starve) the
status patches of other jobs. So the controller owns one pool sized for its workers plus one
job's parallel creations, and a job's fan-out (pod creations, deletions) is capped at
``concurrency`` calls in flight.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def together(*steps: Awaitable[object]) -> None:
    """Await ``steps`` at once, each to its end (none is cut off half-done), then raise the first
    failure in their order: independent writes cost one round trip of latency, not one each."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    failed = next((r for r in results if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed


class Blocking:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_workers: int, concurrency: int) -> None:
        self.loop = loop
        self.concurrency = concurrency
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="kube")

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` in the pool; the loop keeps serving other jobs meanwhile."""
        return await self.loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    async def bounded(self, calls: Sequence[Callable[[], T]]) -> list[T | BaseException]:
        """Run ``calls`` in parallel, at most ``concurrency`` in flight; results in order, an exception
        in place of each call that raised (one refused pod must not hide how the others fared)."""
        sem = asyncio.Semaphore(self.concurrency)

        async def one(call: Callable[[], T]) -> T:
            async with sem:
                return await self.loop.run_in_executor(self.pool, call)

        return list(await asyncio.gather(*(one(call) for call in calls), return_exceptions=True))

    def shutdown(self) -> None:
        """Stop taking calls and drop those not yet started; running ones finish in their threads."""
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def drain(self, timeout: float) -> bool:
        """After ``shutdown``: wait up to ``timeout`` seconds for the calls still running; False if
        some still are. A graceful stop hands the leader Lease over only after its last writes."""
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancellation (Python 3.11)
                await asyncio.to_thread(self.pool.shutdown, wait=True)
        except TimeoutError:
            return False
        return True
