"""The leader elector: one replica reconciles, the others stand by (client-go's LeaderElector).

An asyncio task. Standing by, it tries every ``retry_period`` (with a little jitter, so two
candidates do not keep colliding) to acquire the Lease; the rules are pure, in
``api/lease.py``. Leading, it renews every ``retry_period``; when it has not renewed for
``renew_deadline`` (which is shorter than the lease duration a standby waits), or it sees the
Lease name someone else, it calls ``on_stopped_leading``: the caller fences (stops every worker)
and exits, and Kubernetes restarts the pod clean, as client-go's ``OnStoppedLeading`` does in
kube-controller-manager. A graceful ``stop`` releases the Lease so a standby takes over on its
next try (about ``retry_period``) instead of after a full lease duration.

Lease calls run in a small thread pool of their own: a renewal never queues behind the
controller's pod creations. Each is bounded with ``asyncio.timeout``, not ``asyncio.wait_for``:
on Python 3.11 ``wait_for`` returns the call's result when a cancellation arrives just as the call
completes, and a stopped elector would go on campaigning (and a stop waiting for it would hang).

Time comes from an injected ``Clock`` and waits from an injected ``Sleep`` (controller/clock.py),
so tests step an election one try at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import ParamSpec, TypeVar

from dpjob_operator import metrics
from dpjob_operator.api.lease import LeaseTimings, Observation, Verdict, decide, observe, release
from dpjob_operator.controller.clock import SLEEP, SYSTEM_CLOCK, Clock, Sleep
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.leases import LeaseClient, LeaseConflict

log = logging.getLogger("dpjob.leader")
P = ParamSpec("P")
T = TypeVar("T")
JITTER = 0.2  # up to 20% longer between acquire tries
_OURS = (Verdict.ACQUIRE, Verdict.RENEW)


class MonotonicClock:
    """Wall-clock time that never jumps: the start time plus monotonic elapsed time. Lease
    expiry is measured on this clock, so an NTP step cannot expire (or prolong) a Lease."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._wall, self._mono = datetime.fromtimestamp(clock.time(), UTC), clock.monotonic()

    def __call__(self) -> datetime:
        return self._wall + timedelta(seconds=self._clock.monotonic() - self._mono)


class LeaderElector:
    """``pool``: where Lease calls run (a thread pool of the elector's own unless given)."""

    def __init__(self, leases: LeaseClient, identity: str, timings: LeaseTimings,
                 on_started_leading: Callable[[], None], on_stopped_leading: Callable[[str], None],
                 clock: Clock = SYSTEM_CLOCK, sleep: Sleep = SLEEP, pool: Executor | None = None) -> None:
        self.leases = leases
        self.identity = identity
        self.timings = timings
        self.leading = False
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._now = clock.monotonic
        self._clock = MonotonicClock(clock)
        self._sleep = sleep
        self._observation: Observation | None = None
        self._holder_logged: str | None = None
        self._pool = pool or ThreadPoolExecutor(max_workers=4, thread_name_prefix="lease")
        self._task: asyncio.Task[None] | None = None
        self._gauge = metrics.LEADER.labels(leases.name)
        self._gauge.set(0)

    @property
    def role(self) -> str:
        return "leader" if self.leading else "standby"

    @property
    def holder(self) -> str:
        """The holder of the Lease as last read ("" when none)."""
        record = self._observation.record if self._observation else None
        return record.holder if record else ""

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self.run(), name="leader-election")
        self._task.add_done_callback(self._crashed)
        return self._task

    async def run(self) -> None:
        """Stand by until the Lease is ours, then lead until it cannot be renewed."""
        log.info("leader election: %s is a candidate for lease %s/%s", self.identity, self.leases.namespace,
                 self.leases.name)
        acquired = await self._acquire()
        self._set_leading(True)
        log.info("leader election: %s became the leader (lease %s/%s)", self.identity, self.leases.namespace,
                 self.leases.name)
        self._on_started()
        reason = await self._renew_until_lost(acquired)
        self._on_stopped(reason)  # fence first: no reconcile may start once we are not sure to lead
        self._set_leading(False)

    async def stop(self, release_lease: bool = True) -> None:
        """Stop campaigning; hand the Lease back when we hold it and ``release_lease`` (a graceful stop).
        The caller has stopped its workers first: the next leader must not overlap with us."""
        was_leading = self.leading
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._set_leading(False)
        if release_lease and was_leading:
            await self._release()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- the two loops ------------------------------------------------------------------

    async def _acquire(self) -> float:
        """Try until the Lease is ours; returns when (monotonic) the winning try started."""
        while True:
            started = self._now()
            if await self._try(leading=False) in _OURS:
                return started
            await self._sleep(self.timings.retry_period * (1 + random.uniform(0, JITTER)))

    async def _renew_until_lost(self, acquired: float) -> str:
        """Renew every retry period; returns why leadership ended. The deadline counts from the
        *start* of the last successful try, which is before the server stored that renewal and so
        before any standby can have seen it: we stop before a standby may take over."""
        renewed = acquired
        while True:
            await self._sleep(self.timings.retry_period)
            deadline = renewed + self.timings.renew_deadline
            while True:
                started = self._now()
                verdict = await self._try(leading=True, deadline=deadline)
                if verdict in _OURS:
                    renewed = started
                    break
                if verdict is Verdict.LOST:
                    return f"the lease now names {self.holder or 'no holder'}"
                left = deadline - self._now()
                if left <= 0:
                    return f"could not renew the lease for {self.timings.renew_deadline:g}s (the renew deadline)"
                await self._sleep(min(self.timings.retry_period, left))

    # ---- one try --------------------------------------------------------------------------

    async def _try(self, leading: bool, deadline: float | None = None) -> Verdict | None:
        """Read, decide, write (client-go's tryAcquireOrRenew). The verdict that now holds; None when
        the outcome is unknown: the API failed, timed out, or another candidate wrote first."""
        deadline = deadline if deadline is not None else self._now() + self.timings.renew_deadline
        try:
            stored = await self._blocking(deadline, self.leases.get)
            now = self._clock()
            self._observation = observe(self._observation, stored.spec if stored else None,
                                        stored.resource_version if stored else None, now)
            decision = decide(self._observation, self.identity, now, self.timings.lease_duration, leading)
            if decision.spec is None:  # WAIT, or LOST (the caller says so)
                if decision.verdict is Verdict.WAIT:
                    self._log_holder(decision.holder)
                return decision.verdict
            written = await self._blocking(deadline, self.leases.write, decision.spec, decision.resource_version)
        except LeaseConflict:
            log.info("leader election: another candidate wrote lease %s/%s first", self.leases.namespace,
                     self.leases.name)
            return None
        except Exception as e:  # noqa: BLE001 - any failure is "not renewed": the deadline decides
            log.warning("leader election: lease %s/%s: %s", self.leases.namespace, self.leases.name,
                        errors.describe(e) or type(e).__name__)
            return None
        self._observation = observe(self._observation, written.spec, written.resource_version, self._clock())
        return decision.verdict

    async def _release(self) -> None:
        """Bounded by the renew deadline: a stop must not hang on an unreachable API server. One
        retry on a conflict: a renewal cancelled by the stop may still land just before."""
        deadline = self._now() + self.timings.renew_deadline
        for attempt in (1, 2):
            try:
                if not await self._release_once(deadline):
                    log.info("leader election: lease %s/%s is not ours any more; nothing to release",
                             self.leases.namespace, self.leases.name)
                    return
            except LeaseConflict:
                if attempt == 1:
                    continue
                error = "it kept changing"
            except Exception as e:  # noqa: BLE001 - a standby takes over when the lease expires anyway
                error = errors.describe(e) or type(e).__name__
            else:
                log.info("leader election: %s released lease %s/%s", self.identity, self.leases.namespace,
                         self.leases.name)
                return
            log.warning("leader election: could not release lease %s/%s (%s); a standby takes over when it "
                        "expires", self.leases.namespace, self.leases.name, error)
            return

    async def _release_once(self, deadline: float) -> bool:
        """Read, then write the release; False when the Lease is not ours to release."""
        stored = await self._blocking(deadline, self.leases.get)
        now = self._clock()
        self._observation = observe(self._observation, stored.spec if stored else None,
                                    stored.resource_version if stored else None, now)
        decision = release(self._observation, self.identity, now)
        if decision is None or decision.spec is None:
            return False
        await self._blocking(deadline, self.leases.write, decision.spec, decision.resource_version)
        return True

    async def _blocking(self, deadline: float, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        left = deadline - self._now()
        if left <= 0:
            raise TimeoutError("no time left before the renew deadline")
        call = functools.partial(fn, *args, **kwargs)
        async with asyncio.timeout(left):  # not wait_for: see the module docstring
            return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    # ---- bookkeeping ----------------------------------------------------------------------

    def _set_leading(self, leading: bool) -> None:
        self.leading = leading
        self._gauge.set(1 if leading else 0)

    def _log_holder(self, holder: str) -> None:
        """One line per change of holder, not one every retry period."""
        if holder != self._holder_logged:
            self._holder_logged = holder
            log.info("leader election: standby; lease %s/%s is held by %s", self.leases.namespace,
                     self.leases.name, holder or "nobody")

    def _crashed(self, task: asyncio.Task[None]) -> None:
        """A bug in the loop must leave neither a leader that no longer renews nor a standby that
        never campaigns (and looks alive): either way it ends like a lost Lease."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("leader election failed", exc_info=task.exception())
        self._on_stopped(f"leader election failed: {task.exception()!r}")
        self._set_leading(False)
