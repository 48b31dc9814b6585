"""Expectations: a pass does not repeat a creation or deletion its pod cache has not shown yet.

Without them a gang restart at 512 ranks made 1,541 pod DELETEs and 1,044 POSTs for 512 pods
(issue 13): each pass acted on a cache that trailed its own writes.
"""

from __future__ import annotations

import dataclasses

import pytest

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.controller.expectations import Expectations

pytestmark = pytest.mark.unit
JOB = "job-uid"


def pod(name: str, restart: int = 0, uid: str | None = None, deleting: bool = False,
        owner: str = JOB) -> PodObservation:
    return PodObservation(name=name, uid=uid or f"uid-{name}-{restart}", index=int(name.rsplit("-", 1)[1]),
                          restart=restart, phase="Running", deleting=deleting, owner_uid=owner)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.mark.parametrize("cache, awaited", [
    ([], {"j-rank-0", "j-rank-1"}),                                   # the watch has shown nothing yet
    ([pod("j-rank-0")], {"j-rank-1"}),                                # one seen: only the other is awaited
    ([pod("j-rank-0"), pod("j-rank-1")], set()),                      # both seen: nothing awaited
    ([pod("j-rank-0", restart=1), pod("j-rank-1", restart=1)], {"j-rank-0", "j-rank-1"}),  # another generation's
    ([pod("j-rank-0", owner="someone"), pod("j-rank-1", owner="someone")], {"j-rank-0", "j-rank-1"}),  # not ours
])
def test_a_creation_is_awaited_until_the_cache_shows_that_pod_of_that_generation(clock, cache, awaited):
    e = Expectations(clock=clock)
    e.created(JOB, 0, ["j-rank-0", "j-rank-1"])
    e.settle(JOB, cache)
    assert e.awaited_creations(JOB, 0) == awaited
    assert e.awaited_creations(JOB, 1) == set()  # a new gang generation's pods are not held back


@pytest.mark.parametrize("cache, awaited", [
    ([pod("j-rank-0")], {"j-rank-0"}),                                 # still standing: do not delete again
    ([pod("j-rank-0", deleting=True)], set()),                         # terminating: the delete landed
    ([], set()),                                                       # gone
    ([pod("j-rank-0", restart=1)], set()),                             # a new pod took the name: not awaited
])
def test_a_deletion_is_awaited_until_that_pod_by_uid_is_terminating_or_gone(clock, cache, awaited):
    e = Expectations(clock=clock)
    e.deleted(JOB, {"uid-j-rank-0-0": "j-rank-0"})
    e.settle(JOB, cache)
    assert e.awaited_deletions(JOB) == awaited


def test_expectations_lapse_after_the_timeout_so_a_lost_event_costs_one_call_not_a_stuck_job(clock):
    e = Expectations(timeout=30, clock=clock)
    e.created(JOB, 0, ["j-rank-0"])
    e.deleted(JOB, {"uid-j-rank-1-0": "j-rank-1"})
    clock.now += 29
    e.settle(JOB, [pod("j-rank-1")])
    assert e.awaited_creations(JOB, 0) == {"j-rank-0"} and e.awaited_deletions(JOB) == {"j-rank-1"}
    clock.now += 2
    e.settle(JOB, [pod("j-rank-1")])
    assert e.awaited_creations(JOB, 0) == set() and e.awaited_deletions(JOB) == set()
    assert e.pending() == 0


def test_jobs_are_kept_apart_and_forget_drops_a_deleted_jobs_ledger(clock):
    e = Expectations(clock=clock)
    e.created(JOB, 0, ["j-rank-0"])
    e.created("other", 0, ["o-rank-0"])
    e.settle("other", [dataclasses.replace(pod("o-rank-0"), owner_uid="other")])
    assert e.awaited_creations(JOB, 0) == {"j-rank-0"} and e.awaited_creations("other", 0) == set()
    e.forget(JOB)
    assert e.pending() == 0


def test_settling_a_job_with_nothing_awaited_reads_no_pod(clock):
    """The idle pass of a 4,096-rank job must not pay for expectations (issue 13: < 10 ms)."""
    class Untouchable(list):
        def __iter__(self):
            raise AssertionError("the pods were read")

    Expectations(clock=clock).settle(JOB, Untouchable())
