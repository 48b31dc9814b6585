"""Which PodGroup events queue a pass: a verdict that appears or changes, and nothing else.

A pass per PodGroup event would be one more per gang for nothing (its creation, our own deletes);
a missed verdict would leave an unschedulable gang reported as Starting until the next resync.
"""

from __future__ import annotations

from typing import Any

import pytest

from dpjob_operator.controller.gang_verdicts import GangVerdicts

pytestmark = pytest.mark.unit

UNSCHEDULABLE = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes"}
SCHEDULED = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled", "message": ""}


def group(verdict: dict[str, Any] | None, uid: str = "job-uid", name: str = "train-0") -> dict[str, Any]:
    meta = {"namespace": "ns", "name": name, "labels": {"dpjob.io/job-name": "train"},
            "ownerReferences": [{"kind": "DataParallelJob", "name": "train", "uid": uid, "controller": True}]}
    return {"metadata": meta, "status": {"conditions": [verdict] if verdict else []}}


def cache() -> tuple[GangVerdicts, list[tuple[str, str]]]:
    queued: list[tuple[str, str]] = []
    return GangVerdicts(Any, lambda ns, job: queued.append((ns, job))), queued  # type: ignore[arg-type]


@pytest.mark.parametrize(("events", "passes"), [
    pytest.param([("ADDED", None)], 0, id="created: nothing judged yet"),
    pytest.param([("ADDED", None), ("MODIFIED", UNSCHEDULABLE)], 1, id="the scheduler's first verdict"),
    pytest.param([("ADDED", UNSCHEDULABLE), ("MODIFIED", UNSCHEDULABLE)], 1, id="the same verdict again"),
    pytest.param([("ADDED", UNSCHEDULABLE), ("MODIFIED", SCHEDULED)], 2, id="a changed verdict"),
    pytest.param([("ADDED", SCHEDULED), ("DELETED", SCHEDULED)], 1, id="deleted (an old generation's)"),
])
def test_a_pass_is_queued_for_each_new_verdict_only(events, passes):
    verdicts, queued = cache()
    for event_type, verdict in events:
        verdicts._event(event_type, group(verdict))
    assert queued == [("ns", "train")] * passes


def test_a_verdict_is_read_only_by_the_job_that_controls_the_pod_group():
    """A previous job of the same name leaves a PodGroup of the same name while it is collected."""
    verdicts, _ = cache()
    verdicts._event("ADDED", group(SCHEDULED, uid="previous-uid"))
    assert verdicts.verdict("ns", "train-0", "job-uid") is None
    assert verdicts.verdict("ns", "train-0", "previous-uid") == SCHEDULED
    verdicts._event("DELETED", group(SCHEDULED, uid="previous-uid"))
    assert verdicts.verdict("ns", "train-0", "previous-uid") is None


def test_a_relist_queues_the_verdicts_the_watch_missed_and_keeps_other_namespaces():
    verdicts, queued = cache()
    verdicts._event("ADDED", group(None))
    verdicts._event("ADDED", {**group(SCHEDULED, name="other-0"), "metadata": {
        **group(SCHEDULED)["metadata"], "namespace": "other", "name": "other-0"}})
    queued.clear()
    verdicts._relisted("ns", [group(UNSCHEDULABLE)])
    assert queued == [("ns", "train")]
    assert verdicts.verdict("ns", "train-0", "job-uid") == UNSCHEDULABLE
    assert verdicts.verdict("other", "other-0", "job-uid") == SCHEDULED
