"""Leader election against the real API server's Lease API (issue 11: HA to client-go's standard).

In-process ``LeaderElector`` pairs first: exactly one leads; a leader that stops renewing is
replaced once its Lease expires, and not before; a graceful release hands over within a retry
period; the API server's optimistic concurrency lets exactly one of two racing writes win; the
Lease's holderIdentity and leaseTransitions tell the truth. Then two operator processes: only the
leader reconciles (the standby creates nothing, reconciles nothing and says it stands by), a
SIGKILLed leader's job is taken over without restarting its healthy gang, a SIGTERM releases
the Lease, and a leader whose Lease is taken from it stops and exits non-zero. Timings are
a 10 s lease, renew deadline 7 s, retry 2 s (api/lease.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dpjob_operator.api.lease import LeaseTimings, Verdict, decide, observe
from dpjob_operator.api.timestamps import micro_iso, parse_micro_iso
from dpjob_operator.controller.leader import LeaderElector
from dpjob_operator.k8s.leases import LeaseClient, LeaseConflict
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl, lease, lease_holder, wait_pods
from tests.support.operator import RECONCILES, OperatorProcess, metric_sum
from tests.support.paths import DEVCLUSTER
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)
TIMINGS = LeaseTimings()
LEASE = "dpjob-operator-leader"
# A standby polls every retry period (+20% jitter), plus a request or two.
HANDOVER = TIMINGS.retry_period * 1.2 + 1.0


class Candidate:
    """A LeaderElector with its leadership callbacks recorded."""

    def __init__(self, api: Any, namespace: str, name: str) -> None:
        self.started: list[float] = []
        self.stopped: list[str] = []
        self.elector = LeaderElector(LeaseClient(api, namespace, LEASE), f"{name}_{namespace}", TIMINGS,
                                     on_started_leading=lambda: self.started.append(time.monotonic()),
                                     on_stopped_leading=self.stopped.append)

    @property
    def leading(self) -> bool:
        return self.elector.leading


async def eventually(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``check()`` holds, polled on the loop (the electors run on it meanwhile)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def spec_of(namespace: str) -> dict[str, Any]:
    found = lease(namespace, LEASE)
    assert found is not None, "no Lease"
    spec: dict[str, Any] = found["spec"]
    return spec


async def stored_spec(namespace: str) -> dict[str, Any]:
    """``spec_of`` off the loop: kubectl must not stall the electors under test."""
    return await asyncio.to_thread(spec_of, namespace)


@contextlib.asynccontextmanager
async def pair(api: Any, namespace: str) -> AsyncIterator[tuple[Candidate, Candidate]]:
    """Two candidates campaigning; both stopped at the end, whatever happened (a stopped one stays so)."""
    a, b = Candidate(api, namespace, "a"), Candidate(api, namespace, "b")
    a.elector.start()
    b.elector.start()
    try:
        yield a, b
    finally:
        for candidate in (a, b):
            await candidate.elector.stop(release_lease=False)


async def one_leader(a: Candidate, b: Candidate) -> tuple[Candidate, Candidate]:
    await eventually(lambda: a.leading or b.leading, 10, "a leader")
    await asyncio.sleep(3 * TIMINGS.retry_period)  # both have tried again meanwhile
    assert [a.leading, b.leading].count(True) == 1, "two leaders"
    return (a, b) if a.leading else (b, a)


# ---- two electors in one process ---------------------------------------------------------

def test_exactly_one_leads_and_a_dead_leader_is_replaced_when_its_lease_expires(api, namespace):
    async def scenario() -> None:
        async with pair(api, namespace) as (a, b):
            leader, standby = await one_leader(a, b)
            spec = await stored_spec(namespace)
            assert spec["holderIdentity"] == leader.elector.identity and spec["leaseTransitions"] == 0
            assert spec["leaseDurationSeconds"] == TIMINGS.lease_duration
            assert leader.elector.role == "leader" and standby.elector.role == "standby" and not standby.started

            await leader.elector.stop(release_lease=False)  # it dies: no more renewals, no release
            took = await eventually(lambda: standby.leading, TIMINGS.lease_duration + 8, "the standby to take over")
            # Not before the Lease expired (its last renewal was at most one retry period before the
            # death), and not much after.
            assert TIMINGS.lease_duration - TIMINGS.retry_period - 1 <= took <= TIMINGS.lease_duration + 6, took
            spec = await stored_spec(namespace)
            assert spec["holderIdentity"] == standby.elector.identity and spec["leaseTransitions"] == 1
            acquired, renewed = parse_micro_iso(spec["acquireTime"]), parse_micro_iso(spec["renewTime"])
            assert acquired is not None and renewed is not None and acquired <= renewed
            await asyncio.sleep(2 * TIMINGS.retry_period)
            assert (await stored_spec(namespace))["leaseTransitions"] == 1, "the new leader renews: no more transitions"
            assert standby.stopped == []
            await standby.elector.stop()
    run(scenario)


def test_a_graceful_stop_releases_the_lease_and_the_standby_leads_within_a_retry_period(api, namespace):
    async def scenario() -> None:
        async with pair(api, namespace) as (a, b):
            leader, standby = await one_leader(a, b)
            await leader.elector.stop(release_lease=True)
            took = await eventually(lambda: standby.leading, HANDOVER + 1, "the standby to lead after the release")
            assert took <= HANDOVER, took
            spec = await stored_spec(namespace)
            # The release kept the count; the takeover added one.
            assert spec["holderIdentity"] == standby.elector.identity and spec["leaseTransitions"] == 1
            await standby.elector.stop()
            released = await stored_spec(namespace)
            assert "holderIdentity" not in released and released["leaseDurationSeconds"] == 1
            assert released["leaseTransitions"] == 1
    run(scenario)


def test_two_writes_from_one_reading_cannot_both_win(api, namespace):
    """Optimistic concurrency is the API server's: the loser gets a 409, never a silent overwrite."""
    leases = LeaseClient(api, namespace, LEASE)
    # Whole seconds on purpose: the client's typed V1Lease would send "...:00+00:00", which the
    # API server's MicroTime refuses; the Lease must store exactly the six digits we write.
    now = datetime.now(UTC).replace(microsecond=0)
    created = decide(observe(None, None, None, now), "x", now, TIMINGS.lease_duration)
    assert created.create and created.spec is not None
    first = leases.create(created.spec)
    assert first.spec["acquireTime"] == first.spec["renewTime"] == micro_iso(now)
    assert micro_iso(now).endswith(".000000Z")
    with pytest.raises(LeaseConflict):  # a second create of the same Lease
        leases.create({"holderIdentity": "y", "leaseDurationSeconds": TIMINGS.lease_duration})
    # Two candidates read rv N, both find "x" expired 20 s later, both replace at rv N: one wins.
    reading = observe(None, first.spec, first.resource_version, now)
    later = now + timedelta(seconds=20)
    winners = []
    for who in ("a", "b"):
        decision = decide(reading, who, later, TIMINGS.lease_duration)
        assert decision.verdict is Verdict.ACQUIRE and decision.resource_version == first.resource_version
        assert decision.spec is not None
        try:
            leases.replace(decision.spec, first.resource_version)
            winners.append(who)
        except LeaseConflict:
            pass
    assert winners == ["a"]
    assert lease_holder(namespace, LEASE) == "a" and spec_of(namespace)["leaseTransitions"] == 1


# ---- two operator processes ---------------------------------------------------------------

def _processes(cluster: Any, namespace: str) -> tuple[OperatorProcess, OperatorProcess]:
    """Two operators on one Lease in the test namespace, each watching only that namespace."""
    env = {"DPJOB_NAMESPACES": namespace}
    logs = DEVCLUSTER / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    first = OperatorProcess(cluster, logs / f"operator-{namespace}-a.log", env, lease=(namespace, LEASE))
    second = OperatorProcess(cluster, logs / f"operator-{namespace}-b.log", env, lease=(namespace, LEASE),
                             wait_to_lead=False)
    return first, second


def test_only_the_leader_reconciles_and_a_killed_leaders_jobs_are_taken_over(cluster, api, core, namespace,
                                                                           operator):
    operator.stop()  # the shared operator watches every namespace: only these two may act here
    first, second = _processes(cluster, namespace)
    try:
        first.start()
        second.start()
        wait_until(lambda: "standby; lease" in second.log_text(), timeout=10, what="the standby's log line")
        assert first.leading() and second.role() == "standby"
        wait_until(lambda: first.role() == "leader", timeout=15, what="the leader's /healthz role")

        dpj.create(api, namespace, JobBuilder("one", namespace).replicas(3).obj())
        wait_pods(core, namespace, "one", 3)
        dpj.wait_phase(api, namespace, "one", "Running")
        # One more pass of the leader (these operators watch only this namespace): a standby that
        # reconciled would have by now, on the same events and resync timers.
        first.wait_passes(1, first.passes(), timeout=15, what="the leader's next pass of the job")
        assert len(dpj.rank_pods(core, namespace, "one")) == 3
        leader_metrics, standby_metrics = first.metrics(), second.metrics()
        assert metric_sum(leader_metrics, "dpjob_pods_created_total") == 3
        assert metric_sum(standby_metrics, "dpjob_pods_created_total") == 0
        assert metric_sum(standby_metrics, RECONCILES) == 0
        assert metric_sum(leader_metrics, "leader_election_master_status") == 1
        assert metric_sum(standby_metrics, "leader_election_master_status") == 0
        # sum(dpjob_jobs) over replicas counts the job once: the standby reports zeros.
        assert metric_sum(leader_metrics, "dpjob_jobs") == 1 and metric_sum(standby_metrics, "dpjob_jobs") == 0
        assert "controller started" not in second.log_text()

        first.stop(sig=9)  # no release: the standby waits for the Lease to expire
        took = second.wait_leading(timeout=TIMINGS.lease_duration + 10)
        assert took <= TIMINGS.lease_duration + 6, took
        dpj.create(api, namespace, JobBuilder("two", namespace).replicas(2).obj())
        wait_pods(core, namespace, "two", 2)
        st = dpj.wait_phase(api, namespace, "one", "Running")
        assert st["restarts"] == 0, "the new leader restarted a healthy gang"
        assert len(dpj.rank_pods(core, namespace, "one")) == 3
        assert metric_sum(second.metrics(), "dpjob_pods_created_total") == 2
    finally:
        first.stop()
        second.stop()
        operator.start()


def test_sigterm_releases_the_lease_so_the_standby_leads_at_once(cluster, namespace, operator):
    operator.stop()
    first, second = _processes(cluster, namespace)
    try:
        first.start()
        second.start()
        leader_identity = first.identity
        before = spec_of(namespace)["leaseTransitions"]
        first.stop()  # SIGTERM: workers stop, running calls drain, the Lease is released
        assert first.proc is not None and first.proc.returncode == 0, "a graceful stop exits 0"
        assert "released lease" in first.log_text()
        holder = lease_holder(namespace, LEASE)
        assert holder in ("", second.identity), f"still held by {holder} (the stopped one: {leader_identity})"
        took = second.wait_leading(timeout=HANDOVER + 5)
        assert took <= HANDOVER + 1, took
        assert spec_of(namespace)["leaseTransitions"] == before + 1
    finally:
        first.stop()
        second.stop()
        operator.start()


def test_a_leader_whose_lease_is_taken_stops_and_exits_non_zero(cluster, namespace, operator):
    """client-go's OnStoppedLeading: fence, say why, exit 1 (Kubernetes restarts the pod clean)."""
    operator.stop()
    first, _ = _processes(cluster, namespace)
    try:
        first.start()
        kubectl("patch", "lease", LEASE, "-n", namespace, "--type=merge",
                "-p", json.dumps({"spec": {"holderIdentity": "intruder"}}))
        proc = first.proc
        assert proc is not None
        # One renewal sees it; kopf's graceful stop (workers drained <= 5 s) ends the process.
        wait_until(lambda: proc.poll() is not None, timeout=TIMINGS.retry_period + 25, what="the operator to exit")
        assert proc.returncode == 1
        assert "stopped leading (the lease now names intruder)" in first.log_text()
        assert lease_holder(namespace, LEASE) == "intruder", "it took the Lease back or released it"
    finally:
        first.stop()
        operator.start()

