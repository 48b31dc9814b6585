"""Leader election's rules (api/lease.py), with an injected clock: who may write the Lease, what
it writes, and when a standby takes over. What a user would notice: two replicas never both
reconcile, a dead leader is replaced after one lease duration, a rolling update hands over at once,
and ``kubectl get lease -o yaml`` tells the truth (holder, transitions, times the API accepts).
Against the real API server: tests/integration/test_leader_election.py.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dpjob_operator.api.lease import (
    LEASE_NAME,
    LeaseRecord,
    LeaseTimings,
    Observation,
    Verdict,
    decide,
    expires_at,
    observe,
    release,
)
from dpjob_operator.api.timestamps import micro_iso, parse_micro_iso
from dpjob_operator.config import load_config

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 24, 3, 0, 0, tzinfo=UTC)
ME, OTHER = "dpjob-operator-7d9f-abcde_1a2b3c4d", "dpjob-operator-7d9f-fghij_5e6f7a8b"
DURATION = 15


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def held_by(holder: str, *, renewed: float = 0.0, transitions: int = 3, duration: int = DURATION) -> dict[str, Any]:
    """A Lease spec as the API server returns it."""
    spec: dict[str, Any] = {"leaseDurationSeconds": duration, "leaseTransitions": transitions,
                            "acquireTime": micro_iso(at(-100)), "renewTime": micro_iso(at(renewed))}
    if holder:
        spec["holderIdentity"] = holder
    return spec


def seen(spec: dict[str, Any] | None, seen_at: float = 0.0, rv: str | None = "41") -> Observation:
    """The Lease ``spec`` at resourceVersion ``rv``, first seen unchanged at ``seen_at``."""
    return observe(None, spec, None if spec is None else rv, at(seen_at))


# ---- acquire, renew, wait ------------------------------------------------------------------

@pytest.mark.parametrize("spec, seen_at, now, verdict, holder", [
    (None, 0, 0, Verdict.ACQUIRE, ME),                               # no Lease yet: create it
    (held_by(""), 0, 0, Verdict.ACQUIRE, ME),                        # released: take it at once
    (held_by(OTHER), 0, 14.9, Verdict.WAIT, OTHER),                  # another holder, not expired
    (held_by(OTHER), 0, 15.0, Verdict.ACQUIRE, ME),                  # expired by our clock
    (held_by(OTHER, renewed=-3600), 0, 10, Verdict.WAIT, OTHER),     # an old renewTime alone is no expiry
    (held_by(OTHER, renewed=+3600), 0, 15, Verdict.ACQUIRE, ME),     # nor does a clock ahead prolong it
    (held_by(OTHER, duration=1), 0, 1, Verdict.ACQUIRE, ME),         # its own duration counts
    (held_by(ME), 0, 0, Verdict.RENEW, ME),                          # ours: renew
    (held_by(ME), 0, 60, Verdict.RENEW, ME),                         # ours, even if late (the deadline fences)
], ids=["absent", "released", "held", "expired", "old-renew-time", "skewed-holder-clock", "short-duration",
        "mine", "mine-late"])
def test_decide(spec: dict[str, Any] | None, seen_at: float, now: float, verdict: Verdict, holder: str) -> None:
    decision = decide(seen(spec, seen_at), ME, at(now), DURATION)
    assert (decision.verdict, decision.holder) == (verdict, holder)
    assert (decision.spec is None) == (verdict is Verdict.WAIT)


def test_a_holder_that_keeps_renewing_never_expires() -> None:
    """Each renewal is a new record, so the standby's clock starts again: it waits for good."""
    observation = seen(held_by(OTHER, renewed=0), seen_at=0)
    for t in range(2, 60, 2):
        observation = observe(observation, held_by(OTHER, renewed=t), str(100 + t), at(t))
        assert decide(observation, ME, at(t), DURATION).verdict is Verdict.WAIT
    assert expires_at(observation) == at(58 + DURATION)


def test_a_holder_that_stops_renewing_expires_one_duration_after_we_last_saw_it_change() -> None:
    observation = seen(held_by(OTHER, renewed=0), seen_at=0)
    for t in (2, 4, 6):
        observation = observe(observation, held_by(OTHER, renewed=t), str(100 + t), at(t))
    for t in (8, 10, 20):  # it died after renewing at 6: the same record from now on
        observation = observe(observation, held_by(OTHER, renewed=6), "106", at(t))
    assert decide(observation, ME, at(20.9), DURATION).verdict is Verdict.WAIT
    assert decide(observation, ME, at(21), DURATION).verdict is Verdict.ACQUIRE


# ---- what is written ------------------------------------------------------------------------

def test_first_acquire_creates_the_lease_with_zero_transitions() -> None:
    decision = decide(seen(None), ME, T0, DURATION)
    assert decision.create and decision.resource_version is None
    assert decision.spec == {"holderIdentity": ME, "leaseDurationSeconds": 15, "leaseTransitions": 0,
                             "acquireTime": "2026-11-24T03:00:00.000000Z",
                             "renewTime": "2026-11-24T03:00:00.000000Z"}


@pytest.mark.parametrize("spec, transitions", [
    (held_by(OTHER, transitions=3), 4),   # taken from another holder: one more transition
    (held_by("", transitions=3), 4),      # taken after a release: one more too
    (held_by(ME, transitions=3), 3),      # renewed: the same holder, no transition
], ids=["takeover", "after-release", "renew"])
def test_transitions_count_changes_of_holder(spec: dict[str, Any], transitions: int) -> None:
    decision = decide(seen(spec, seen_at=-DURATION), ME, at(0.5), DURATION)
    assert decision.spec is not None and decision.spec["leaseTransitions"] == transitions


def test_renew_keeps_acquire_time_and_moves_renew_time() -> None:
    decision = decide(seen(held_by(ME)), ME, at(2.25), DURATION)
    assert decision.spec is not None
    assert decision.spec["acquireTime"] == micro_iso(at(-100))
    assert decision.spec["renewTime"] == "2026-11-24T03:00:02.250000Z"


def test_every_write_replaces_the_lease_at_the_version_it_was_decided_from() -> None:
    """Optimistic concurrency: two candidates deciding from the same reading both write at rv 41;
    the API server accepts one and answers the other 409."""
    observation = seen(held_by(OTHER), seen_at=0, rv="41")
    mine = decide(observation, ME, at(DURATION), DURATION)
    theirs = decide(observation, "third_candidate", at(DURATION), DURATION)
    assert not mine.create and mine.resource_version == theirs.resource_version == "41"


def test_a_stale_reading_is_replaced_by_the_next_one() -> None:
    """We decided to acquire at rv 41, but lost the race (409): the next reading names the winner,
    and we wait instead of overwriting it."""
    stale = seen(held_by(""), rv="41")
    assert decide(stale, ME, at(1), DURATION).verdict is Verdict.ACQUIRE
    fresh = observe(stale, held_by(OTHER, renewed=1, transitions=4), "42", at(1))
    decision = decide(fresh, ME, at(1), DURATION)
    assert (decision.verdict, decision.holder, decision.spec) == (Verdict.WAIT, OTHER, None)


def test_micro_time_round_trips_and_whole_seconds_are_read_too() -> None:
    assert micro_iso(at(0.000001)) == "2026-11-24T03:00:00.000001Z"
    assert parse_micro_iso("2026-11-24T03:00:00.000001Z") == at(0.000001)
    assert parse_micro_iso("2026-11-24T03:00:00Z") == T0
    assert parse_micro_iso(None) is None
    record = LeaseRecord.from_spec(held_by(OTHER, transitions=7))
    assert LeaseRecord.from_spec(record.to_spec()) == record


# ---- losing and releasing ---------------------------------------------------------------------

@pytest.mark.parametrize("spec", [held_by(OTHER), held_by(""), None], ids=["taken", "cleared", "deleted"])
def test_a_leader_whose_lease_names_anyone_else_has_lost_it(spec: dict[str, Any] | None) -> None:
    """Even an expired or absent Lease is not taken back: another replica may have led meanwhile."""
    decision = decide(seen(spec, seen_at=-60), ME, T0, DURATION, leading=True)
    assert decision.verdict is Verdict.LOST and decision.spec is None


def test_release_clears_the_holder_and_keeps_the_count() -> None:
    decision = release(seen(held_by(ME, transitions=5), rv="77"), ME, at(1))
    assert decision is not None and decision.verdict is Verdict.RELEASE
    assert decision.resource_version == "77"
    assert decision.spec == {"leaseDurationSeconds": 1, "leaseTransitions": 5,
                             "acquireTime": micro_iso(at(1)), "renewTime": micro_iso(at(1))}
    # The next candidate takes it on its first try, and counts the transition.
    after = seen(decision.spec, seen_at=1)
    taken = decide(after, OTHER, at(1), DURATION)
    assert taken.verdict is Verdict.ACQUIRE and taken.spec is not None and taken.spec["leaseTransitions"] == 6


@pytest.mark.parametrize("spec", [held_by(OTHER), held_by(""), None], ids=["theirs", "free", "absent"])
def test_release_never_touches_a_lease_that_is_not_ours(spec: dict[str, Any] | None) -> None:
    assert release(seen(spec), ME, T0) is None


def test_timings_must_let_the_leader_give_up_before_a_standby_takes_over() -> None:
    assert LeaseTimings() == LeaseTimings(10, 7.0, 2.0)
    with pytest.raises(ValueError, match="leaseDuration > renewDeadline"):
        LeaseTimings(lease_duration=10, renew_deadline=10)


def test_an_observation_keeps_its_first_sighting_while_the_record_is_unchanged() -> None:
    first = seen(held_by(OTHER), seen_at=0, rv="41")
    again = observe(first, held_by(OTHER), "41", at(5))
    assert again.seen_at == T0 and replace(again, seen_at=T0) == first


# ---- configuration ------------------------------------------------------------------------------

@pytest.mark.parametrize("env, sa_namespace, enabled, namespace", [
    ({}, None, False, "default"),                                                   # a plain process
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, "dpjob-system", True, "dpjob-system"),  # a pod
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "DPJOB_POD_NAMESPACE": "ops"}, None, True, "ops"),
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "DPJOB_LEADER_ELECTION": "false"}, "ops", False, "ops"),
    ({"DPJOB_LEADER_ELECTION": "true", "DPJOB_LEADER_ELECTION_NAMESPACE": "le"}, None, True, "le"),
], ids=["process", "pod", "downward-api", "disabled", "process-opted-in"])
def test_leader_election_config(tmp_path: Path, env: dict[str, str], sa_namespace: str | None, enabled: bool,
                                namespace: str) -> None:
    sa_file = tmp_path / "namespace"
    if sa_namespace is not None:
        sa_file.write_text(sa_namespace)
    cfg = load_config(environ=env, serviceaccount_namespace=sa_file).leader_election
    assert (cfg.enabled, cfg.namespace, cfg.lease_name) == (enabled, namespace, LEASE_NAME)


def test_identity_is_the_pod_name_and_a_random_suffix_else_hostname_pid(tmp_path: Path) -> None:
    absent = tmp_path / "none"
    a = load_config(environ={"DPJOB_POD_NAME": "op-1"}, serviceaccount_namespace=absent).leader_election.identity
    b = load_config(environ={"DPJOB_POD_NAME": "op-1"}, serviceaccount_namespace=absent).leader_election.identity
    assert a.startswith("op-1_") and b.startswith("op-1_") and a != b  # a restarted pod is a new candidate
    plain = load_config(environ={}, serviceaccount_namespace=absent).leader_election.identity
    assert plain == f"{socket.gethostname()}_{os.getpid()}"


def test_the_config_file_and_the_environment_set_it_and_a_typo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"leaderElection": {"enabled": false}}')
    pod_env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "DPJOB_POD_NAMESPACE": "ops"}
    assert not load_config(str(path), environ=pod_env).leader_election.enabled
    path.write_text('{"leaderElection": {"enabled": true, "leaseName": "from-file"}}')
    assert load_config(str(path), environ={}).leader_election.lease_name == "from-file"
    env = {"DPJOB_LEADER_ELECTION_LEASE_NAME": "from-env"}
    assert load_config(str(path), environ=env).leader_election.lease_name == "from-env"
    with pytest.raises(ValueError, match="DPJOB_LEADER_ELECTION must be true or false"):
        load_config(environ={"DPJOB_LEADER_ELECTION": "maybe"}, serviceaccount_namespace=tmp_path / "none")
