"""The leader elector's loop, one try at a time, on a fake clock and an in-memory Lease.

Each candidate sleeps on its own ``ManualSleep``: the test decides whose try runs next and how
much time has passed, so "the standby takes over once the Lease expired" is a sequence of tries
on a clock the test moves, not a wait of ten real seconds. Lease calls run inline (no thread):
the order of events on the loop is the same on every run. Every elector is stopped in a
``finally``, so a failing test leaves no task campaigning behind it. The real API server's side
(resourceVersion preconditions, MicroTime) is tests/integration/test_leader_election.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from dpjob_operator.api.lease import LeaseTimings
from dpjob_operator.controller.leader import LeaderElector
from dpjob_operator.k8s.leases import LeaseConflict, StoredLease
from tests.support.clocks import FakeClock, ManualSleep

pytestmark = pytest.mark.unit
TIMINGS = LeaseTimings(lease_duration=10, renew_deadline=7.0, retry_period=2.0)


class InlineExecutor(Executor):
    """Runs each Lease call at once, on the loop's thread: no thread races the test's steps."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting elector, as a pool would
            future.set_exception(e)
        return future


class LeaseStore:
    """One Lease as the API server keeps it: a spec and a resourceVersion that every write bumps."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] | None = None
        self.version = 0
        self.reachable = True
        self.on_get: Callable[[], None] | None = None  # runs inside the next GET, once

    def holder(self) -> str:
        return (self.spec or {}).get("holderIdentity") or ""


class FakeLeases:
    """``k8s.leases.LeaseClient`` over a ``LeaseStore``: 409 on a stale resourceVersion."""

    namespace, name = "dpjob-system", "dpjob-operator"

    def __init__(self, store: LeaseStore) -> None:
        self.store = store

    def get(self) -> StoredLease | None:
        self._check()
        hook, self.store.on_get = self.store.on_get, None
        if hook is not None:
            hook()
        return None if self.store.spec is None else StoredLease(dict(self.store.spec), str(self.store.version))

    def write(self, spec: dict[str, Any], resource_version: str | None) -> StoredLease:
        self._check()
        current = None if self.store.spec is None else str(self.store.version)
        if resource_version != current:
            raise LeaseConflict("the lease changed meanwhile")
        self.store.spec, self.store.version = dict(spec), self.store.version + 1
        return StoredLease(dict(spec), str(self.store.version))

    def _check(self) -> None:
        if not self.store.reachable:
            raise ConnectionRefusedError("the API server is unreachable")


class Candidate:
    """An elector with its own sleep, and what its leadership callbacks were told."""

    def __init__(self, store: LeaseStore, name: str, clock: FakeClock, sleep: ManualSleep) -> None:
        self.sleep = sleep
        self.started = 0
        self.stopped: list[str] = []
        self.elector = LeaderElector(FakeLeases(store), name, TIMINGS, on_started_leading=self._started,
                                     on_stopped_leading=self.stopped.append, clock=clock, sleep=sleep,
                                     pool=InlineExecutor())
        self.task: asyncio.Task[None] | None = None

    def _started(self) -> None:
        self.started += 1

    async def start(self) -> None:
        """Start campaigning; return after the first try, once the elector sleeps (or ended)."""
        self.task = self.elector.start()
        await self.settled()

    async def next_try(self) -> None:
        """Let the elector's sleep end; return after its next try, once it sleeps again (or ended)."""
        self.sleep.release()
        await self.settled()

    async def settled(self) -> None:
        assert self.task is not None
        parked = asyncio.ensure_future(self.sleep.parked())
        try:
            await asyncio.wait([self.task, parked], return_when=asyncio.FIRST_COMPLETED)
        finally:
            parked.cancel()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(30):  # a guard against a hang; nothing here waits on time
            await scenario()
    asyncio.run(bounded())


@contextlib.asynccontextmanager
async def election(*names: str, sleep_moves_clock: bool = False) -> AsyncIterator[
        tuple[FakeClock, LeaseStore, list[Candidate]]]:
    """Candidates on one Lease and one clock, started in order (each after the previous one's
    first try); every one stopped at the end, whatever the test did. With ``sleep_moves_clock``,
    each released sleep moves the clock by its length."""
    clock, store = FakeClock(), LeaseStore()
    candidates = [Candidate(store, name, clock, ManualSleep(clock if sleep_moves_clock else None))
                  for name in names]
    try:
        for candidate in candidates:
            await candidate.start()
        yield clock, store, candidates
    finally:
        for candidate in candidates:
            await candidate.elector.stop(release_lease=False)


def test_one_candidate_leads_and_the_other_stands_by_while_the_leader_renews():
    async def scenario() -> None:
        async with election("a", "b") as (clock, store, (a, b)):
            assert (a.elector.role, b.elector.role, store.holder()) == ("leader", "standby", "a")
            for _ in range(10):  # 20 s, twice the lease duration: renewals keep the Lease alive
                clock.advance(TIMINGS.retry_period)
                await a.next_try()
                await b.next_try()
            assert (a.elector.role, b.elector.role, store.holder()) == ("leader", "standby", "a")
            assert (a.started, b.started, store.spec["leaseTransitions"]) == (1, 0, 0)
            assert b.elector.holder == "a"
    run(scenario)


def test_a_dead_leader_is_replaced_only_once_its_lease_expired():
    async def scenario() -> None:
        async with election("a", "b") as (clock, store, (a, b)):
            await a.elector.stop(release_lease=False)  # it dies: no more renewals, no release
            waited = 0.0
            while not b.elector.leading:
                clock.advance(1.0)
                waited += 1.0
                await b.next_try()
                assert waited <= TIMINGS.lease_duration + 1, "the standby never took over"
            assert waited >= TIMINGS.lease_duration, f"took over {waited}s after the last renewal"
            assert (store.holder(), store.spec["leaseTransitions"], b.started) == ("b", 1, 1)
            assert a.stopped == [] and b.stopped == []
    run(scenario)


def test_a_graceful_stop_hands_the_lease_to_the_standbys_next_try():
    async def scenario() -> None:
        async with election("a", "b") as (clock, store, (a, b)):
            await a.elector.stop(release_lease=True)
            assert store.holder() == "" and a.elector.role == "standby"
            clock.advance(TIMINGS.retry_period)  # one retry period, far less than the lease duration
            await b.next_try()
            assert (b.elector.role, store.holder()) == ("leader", "b")
    run(scenario)


def test_a_leader_that_cannot_renew_stops_leading_before_a_standby_may_take_over():
    async def scenario() -> None:
        async with election("a", sleep_moves_clock=True) as (clock, store, (a,)):
            last_renewal = clock.monotonic()
            store.reachable = False
            while not a.task.done():
                await a.next_try()
                assert clock.monotonic() - last_renewal < TIMINGS.lease_duration, "still leading after the lease"
            assert a.stopped == ["could not renew the lease for 7s (the renew deadline)"]
            assert not a.elector.leading
    run(scenario)


def test_a_leader_that_sees_the_lease_name_another_stops_at_once():
    async def scenario() -> None:
        async with election("a") as (_clock, store, (a,)):
            store.spec = {**store.spec, "holderIdentity": "intruder"}
            store.version += 1
            await a.next_try()
            assert a.task.done() and a.stopped == ["the lease now names intruder"] and not a.elector.leading
    run(scenario)


def test_a_cancellation_that_arrives_as_a_lease_call_completes_stops_the_elector():
    """``asyncio.wait_for`` on Python 3.11 returns the call's result instead when the cancellation
    and the result land in the same loop turn: the elector renewed, slept, and campaigned on, and
    ``stop`` (the operator's SIGTERM path) waited for it forever."""
    async def scenario() -> None:
        async with election("a") as (_clock, store, (a,)):
            version = store.version
            store.on_get = lambda: asyncio.get_running_loop().call_soon(a.task.cancel)
            await a.next_try()
            assert a.task.cancelled(), "a cancelled elector went on campaigning"
            assert store.version == version, "a cancelled elector wrote the Lease"
            await a.elector.stop(release_lease=True)
            assert store.holder() == "", "a graceful stop after the cancellation still releases the Lease"
    run(scenario)
