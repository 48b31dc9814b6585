"""The controller's work queue: what a job owner would notice is how often, and when, a job is
reconciled. Dedup and one timer per key keep that to once per burst; dirty requeue makes sure a
change that arrives mid-pass is still seen; backoff spaces out a broken job's retries.

pytest-asyncio is not installed: each test drives its own loop with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from dpjob_operator.controller.workqueue import ExponentialBackoff, WorkQueue
from dpjob_operator.metrics import REGISTRY
from tests.support.clocks import FakeTimers

pytestmark = pytest.mark.unit
_names = itertools.count()


def new_queue(timers: FakeTimers | None = None) -> WorkQueue[str]:
    """A queue with its own metric label, so tests do not see each other's adds; with ``timers``,
    its delayed adds fire when the test moves the fake clock, not after real time."""
    return WorkQueue(f"test-{next(_names)}", loop=timers)


def metric(name: str, queue: WorkQueue[str]) -> float:
    return REGISTRY.get_sample_value(name, {"name": queue.name}) or 0.0


async def taken(queue: WorkQueue[str]) -> list[str]:
    """Every key waiting now, in the order workers would get them."""
    keys = []
    for _ in range(len(queue)):
        key = await queue.get()
        queue.done(key)
        keys.append(key)
    return keys


# ---- one timer per key -------------------------------------------------------------------

@pytest.mark.parametrize("delays, passes", [
    ((0.01,), 1),
    ((0.01, 0.02, 0.03), 1),          # later timers are dropped: one pass, not three
    ((0.03, 0.02, 0.01), 1),          # an earlier timer replaces the later one
    ((0.01, 0.01, 0.01, 0.01), 1),
])
def test_delayed_adds_of_one_key_share_one_timer(delays: tuple[float, ...], passes: int) -> None:
    async def scenario() -> tuple[int, list[str], int]:
        timers = FakeTimers()
        queue = new_queue(timers)
        for delay in delays:
            queue.add_after("ns/job", delay)
        pending = timers.pending
        timers.advance(max(delays) + 60)  # long after every delay asked for
        return pending, await taken(queue), timers.pending

    pending, keys, left = asyncio.run(scenario())
    assert (pending, keys, left) == (1, ["ns/job"] * passes, 0)


@pytest.mark.parametrize("delays, fires_after", [
    ((30.0, 5.0), 5.0),               # the earliest due time wins, whichever came first
    ((5.0, 30.0), 5.0),
    ((60.0, 1.0, 30.0), 1.0),
])
def test_the_timer_kept_is_the_earliest(delays: tuple[float, ...], fires_after: float) -> None:
    async def scenario() -> float | None:
        timers = FakeTimers()
        queue = new_queue(timers)
        start = timers.time()
        for delay in delays:
            queue.add_after("ns/job", delay)
        due = queue.timer_due("ns/job")
        queue.shutdown()
        return None if due is None else due - start

    assert asyncio.run(scenario()) == fires_after


def test_timers_of_different_keys_are_independent() -> None:
    async def scenario() -> list[str]:
        timers = FakeTimers()
        queue = new_queue(timers)
        queue.add_after("ns/a", 0.02)
        queue.add_after("ns/b", 0.01)
        fired_early = timers.advance(0.015)
        early = await taken(queue)
        timers.advance(1.0)
        assert fired_early == 1 and timers.pending == 0
        return early + await taken(queue)

    assert asyncio.run(scenario()) == ["ns/b", "ns/a"]


def test_a_zero_delay_adds_now_and_leaves_the_timer() -> None:
    async def scenario() -> tuple[int, float | None]:
        queue = new_queue()
        queue.add_after("ns/job", 30.0)
        queue.add_after("ns/job", 0.0)
        due = queue.timer_due("ns/job")
        queue.shutdown()
        return len(queue), due

    queued, due = asyncio.run(scenario())
    assert queued == 1 and due is not None


# ---- dedup ---------------------------------------------------------------------------------

@pytest.mark.parametrize("adds, queued", [
    (["a"], ["a"]),
    (["a", "a", "a"], ["a"]),
    (["a", "b", "a", "b", "c"], ["a", "b", "c"]),  # first-come order is kept
])
def test_a_waiting_key_is_queued_once(adds: list[str], queued: list[str]) -> None:
    async def scenario() -> tuple[list[str], WorkQueue[str], float]:
        queue = new_queue()
        for key in adds:
            queue.add(key)
        depth = metric("workqueue_depth", queue)
        return [await queue.get() for _ in range(len(queue))], queue, depth

    got, queue, depth = asyncio.run(scenario())
    assert got == queued
    assert depth == len(queued)
    assert metric("workqueue_adds_total", queue) == len(queued)
    assert metric("workqueue_depth", queue) == 0


# ---- one worker per key, dirty requeue -----------------------------------------------------

@pytest.mark.parametrize("adds_while_active, requeued", [(0, False), (1, True), (3, True)])
def test_a_key_added_while_processed_is_queued_again_when_done(adds_while_active: int, requeued: bool) -> None:
    async def scenario() -> tuple[int, bool, int]:
        queue = new_queue()
        queue.add("ns/job")
        key = await queue.get()
        for _ in range(adds_while_active):
            queue.add(key)
        waiting_while_active = len(queue)  # never handed to a second worker meanwhile
        return waiting_while_active, queue.done(key), len(queue)

    waiting, done_requeued, after = asyncio.run(scenario())
    assert waiting == 0
    assert done_requeued is requeued
    assert after == (1 if requeued else 0)


def test_two_workers_never_hold_the_same_key() -> None:
    async def scenario() -> tuple[int, int]:
        queue = new_queue()
        holding: set[str] = set()
        passes, overlaps = 0, 0

        enough = asyncio.Event()

        async def worker() -> None:
            nonlocal passes, overlaps
            while True:
                key = await queue.get()
                passes += 1
                overlaps += key in holding
                holding.add(key)
                queue.add(key)  # an event arrives mid-pass
                await asyncio.sleep(0)  # the pass yields: every other worker gets its turn meanwhile
                holding.discard(key)
                queue.done(key)
                if passes >= 20:
                    enough.set()

        queue.add("ns/job")
        tasks = [asyncio.create_task(worker()) for _ in range(4)]
        async with asyncio.timeout(10):  # a guard: a lost mid-pass event leaves the workers idle for good
            await enough.wait()
        for task in tasks:
            task.cancel()
        return passes, overlaps

    passes, overlaps = asyncio.run(scenario())
    assert overlaps == 0
    assert passes > 1  # the mid-pass events were not lost


# ---- backoff -------------------------------------------------------------------------------

@pytest.mark.parametrize("failures, delay", [
    (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 16.0), (6, 32.0), (7, 60.0), (12, 60.0),
])
def test_backoff_doubles_per_consecutive_failure_up_to_a_minute(failures: int, delay: float) -> None:
    queue = new_queue()
    delays = [queue.backoff("ns/job") for _ in range(failures)]
    assert delays[-1] == delay
    assert queue.failures("ns/job") == failures


def test_success_resets_the_backoff_of_that_key_only() -> None:
    queue = new_queue()
    for _ in range(4):
        queue.backoff("ns/broken")
        queue.backoff("ns/other")
    queue.forget("ns/broken")
    assert queue.backoff("ns/broken") == 1.0
    assert queue.backoff("ns/other") == 16.0  # its fifth failure in a row


def test_backoff_limits_are_configurable() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff(base_seconds=0.005, max_seconds=0.02)
    assert [backoff.when("k") for _ in range(4)] == [0.01, 0.02, 0.02, 0.02]
