"""An idle pass does not rebuild the rank table: the outcome is reused exactly while the job's
spec, generation and pod records are the same, and rebuilt as soon as one of them changes."""

from __future__ import annotations

import dataclasses

import pytest

from dpjob_operator.controller.observer import RankTableMemo
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit


def _job(replicas: int = 2):
    return JobBuilder().replicas(replicas).set("rankTable", {"format": "generic"}).job()


def _pods(job, n: int = 2):
    return [pod(i, owner_uid=job.uid) for i in range(n)]


def test_the_same_records_reuse_the_outcome():
    job, memo = _job(), RankTableMemo()
    pods = _pods(job)
    first = memo.outcome(job, 0, pods)
    assert first is not None and first.ready
    assert memo.outcome(job, 0, list(pods)) is first  # a new list of the same records: reused


@pytest.mark.parametrize("change", ["a pod changed", "a pod more", "another generation", "another spec", "forgotten"])
def test_any_change_rebuilds_the_outcome(change):
    job, memo = _job(), RankTableMemo()
    pods = _pods(job)
    first = memo.outcome(job, 0, pods)
    gen = 0
    if change == "a pod changed":  # the pod cache replaces a changed pod's record, even with equal fields
        pods = [pods[0], dataclasses.replace(pods[1], pod_ip="10.9.9.9")]
    elif change == "a pod more":
        pods = [*pods, pod(2, owner_uid=job.uid)]
    elif change == "another generation":
        gen = 1
    elif change == "another spec":
        job = dataclasses.replace(job, spec=_job(3).spec)
    else:
        memo.forget(job.uid)
    again = memo.outcome(job, gen, pods)
    assert again is not first
    if change == "a pod changed":
        assert "10.9.9.9" in "".join(again.files.values())
