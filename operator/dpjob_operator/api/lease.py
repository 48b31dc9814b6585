"""Leader election on a ``coordination.k8s.io/v1`` Lease: the rules, with no I/O.

These are client-go's ``leaderelection`` rules, so that two operator replicas (a rolling update,
``replicas: 2``) never both reconcile:

* **acquire** a Lease that does not exist, is free (no holder: released), or has expired;
  a change of holder counts one more ``leaseTransitions``;
* **renew** a Lease we hold: same ``acquireTime`` and transitions, a new ``renewTime``;
* **wait** while someone else holds it and it has not expired;
* a leader whose Lease names anyone else (taken over, released or recreated behind its back)
  has **lost** it: another replica may already have acted as leader, so it must stop at once
  rather than take the Lease back.

Expiry is judged by *this candidate's own clock*: a record expires ``leaseDurationSeconds``
after the moment we first saw it unchanged (``Observation.seen_at``), not after its
``renewTime``. The holder's clock may be ahead of ours, or behind; trusting its timestamp would
let a skewed standby take a Lease that is still being renewed. It costs a new candidate one full
lease duration before it takes over a dead holder's Lease, as in client-go.

Every write is a replace carrying the ``resourceVersion`` it was decided from (or a create when
there was no Lease): of two candidates deciding from the same observation, the API server lets
exactly one write win and answers the other 409 Conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dpjob_operator.api.timestamps import micro_iso, parse_micro_iso

LEASE_NAME = "dpjob-operator-leader"
# A released Lease: no holder, and a duration short enough that a candidate that still sees the
# old holder (it read just before the release) waits only this long.
RELEASED_DURATION_SECONDS = 1


@dataclass(frozen=True)
class LeaseTimings:
    """client-go's rules with a shorter lease than its 15 s / 10 s defaults: a standby takes over
    within the lease plus about two retry periods (10-14 s; under 15 s, measured by
    tests/chaos/test_two_replicas_churn.py) after a leader dies without releasing the Lease. A
    leader still gives up 3 s before any standby can see the Lease expire."""

    lease_duration: int = 10      # a standby takes over this long after the last change it saw
    renew_deadline: float = 7.0   # the leader stops leading when it could not renew for this long
    retry_period: float = 2.0     # between acquire tries, and between renewals while leading

    def __post_init__(self) -> None:
        # The leader must give up before a standby may take over, and must get several tries first.
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("leader election needs leaseDuration > renewDeadline > retryPeriod > 0, got "
                             f"{self.lease_duration} / {self.renew_deadline} / {self.retry_period}")


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease's spec, typed."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(holder=str(spec.get("holderIdentity") or ""),
                   lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=parse_micro_iso(spec.get("acquireTime")),
                   renew_time=parse_micro_iso(spec.get("renewTime")),
                   transitions=int(spec.get("leaseTransitions") or 0))

    def to_spec(self) -> dict[str, Any]:
        """The spec as the API expects it; a released Lease has no ``holderIdentity``."""
        spec: dict[str, Any] = {"leaseDurationSeconds": self.lease_duration_seconds,
                                "leaseTransitions": self.transitions}
        if self.holder:
            spec["holderIdentity"] = self.holder
        if self.acquire_time is not None:
            spec["acquireTime"] = micro_iso(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = micro_iso(self.renew_time)
        return spec


@dataclass(frozen=True)
class Observation:
    """What a candidate knows of the Lease: its record (None: no Lease exists), the
    resourceVersion it was read at (the precondition of our next write), and when we first saw
    this record unchanged, by our own clock."""

    record: LeaseRecord | None
    resource_version: str | None
    seen_at: datetime


def observe(previous: Observation | None, spec: Mapping[str, Any] | None, resource_version: str | None,
            now: datetime) -> Observation:
    """A new reading of the Lease (``spec`` None: there is none). ``seen_at`` moves only when
    the record changed: a holder that keeps renewing keeps its Lease alive, a dead one does not."""
    record = None if resource_version is None else LeaseRecord.from_spec(spec)
    if previous is not None and previous.record == record:
        return replace(previous, resource_version=resource_version)
    return Observation(record, resource_version, now)


def expires_at(observation: Observation) -> datetime:
    """When, by our clock, the observed holder's Lease runs out unless it is renewed."""
    duration = observation.record.lease_duration_seconds if observation.record else 0
    return observation.seen_at + timedelta(seconds=duration)


class Verdict(StrEnum):
    ACQUIRE = "acquire"
    RENEW = "renew"
    WAIT = "wait"
    RELEASE = "release"
    LOST = "lost"


@dataclass(frozen=True)
class Decision:
    """What to do now. ``spec`` is the Lease spec to write (None for WAIT); the write replaces
    the Lease at ``resource_version``, or creates it when that is None."""

    verdict: Verdict
    holder: str
    spec: dict[str, Any] | None = None
    resource_version: str | None = None
    expires_at: datetime | None = None  # WAIT: when the holder's Lease runs out by our clock

    @property
    def create(self) -> bool:
        return self.spec is not None and self.resource_version is None


def decide(observation: Observation, identity: str, now: datetime, lease_duration: int,
           leading: bool = False) -> Decision:
    """Acquire, renew, wait, or (``leading``) lost: see the module docstring. ``identity`` is
    this candidate; ``leading`` says it held the Lease until now."""
    record = observation.record
    if leading and (record is None or record.holder != identity):
        return Decision(Verdict.LOST, record.holder if record else "")
    if record is None:
        mine = LeaseRecord(identity, lease_duration, now, now, 0)
        return Decision(Verdict.ACQUIRE, identity, mine.to_spec())
    if record.holder == identity:
        renewed = replace(record, lease_duration_seconds=lease_duration, renew_time=now,
                          acquire_time=record.acquire_time or now)
        return Decision(Verdict.RENEW, identity, renewed.to_spec(), observation.resource_version)
    until = expires_at(observation)
    if record.holder and now < until:
        return Decision(Verdict.WAIT, record.holder, expires_at=until)
    taken = LeaseRecord(identity, lease_duration, now, now, record.transitions + 1)
    return Decision(Verdict.ACQUIRE, identity, taken.to_spec(), observation.resource_version)


def release(observation: Observation, identity: str, now: datetime) -> Decision | None:
    """The write that hands the Lease back (a graceful stop), so a standby takes over on its next
    try instead of after a full lease duration; None when the Lease is not ours to release."""
    record = observation.record
    if record is None or record.holder != identity:
        return None
    released = LeaseRecord("", RELEASED_DURATION_SECONDS, now, now, record.transitions)
    return Decision(Verdict.RELEASE, "", released.to_spec(), observation.resource_version)
