"""The typed job status (api/status.py): what is stored reads back as written, and the status write
sends exactly what changed (an RFC 7386 merge patch, computed from two statuses)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from dpjob_operator.api.merge_patch import status_patch
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.status import (
    Condition,
    Gang,
    JobStatus,
    LastFailure,
    Progress,
    SlowestRank,
    wire_status,
)
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit

STORED: dict[str, Any] = {
    "phase": "Running", "reason": "AllRanksRunning", "message": "all 2 rank(s) running, world size 16",
    "observedGeneration": 3, "replicas": 2, "readyReplicas": 2, "runningReplicas": 2, "succeededReplicas": 0,
    "failedReplicas": 0, "ready": "2/2", "selector": "dpjob.io/job-name=train", "worldSize": 16,
    "restarts": 1, "failureRestarts": 1, "restartsByReason": {"RankFailed": 1},
    "startTime": "2026-11-21T11:00:00Z",
    "progress": {"restart": 1, "step": 420, "totalSteps": 1000, "percent": 42, "summary": "420/1000 (42%)",
                 "stepsPerSecond": 2.0, "samplesPerSecond": 64, "eta": "2026-11-21T12:04:40Z",
                 "remaining": "4m40s", "loss": 0.123457, "epoch": 2, "lastStepTime": "2026-11-21T11:59:50Z",
                 "checkpointStep": 400, "checkpointTime": "2026-11-21T11:59:45Z",
                 "observedTime": "2026-11-21T12:00:00Z", "slowestRank": {"rank": 1, "ratio": 1.8}},
    "avoidNodes": {"restart": 1, "nodes": ["node-a"], "reason": "node node-a is NotReady"},
    "lastStall": {"reason": "Stalled", "step": 300, "restart": 0, "time": "2026-11-21T11:30:00Z",
                  "message": "no step for 600s"},
    "lastFailure": {"rank": 1, "pod": "train-rank-1", "node": "node-a", "container": "trainer", "exitCode": 137,
                    "reason": "OOMKilled", "message": "", "restart": 0, "time": "2026-11-21T11:40:00Z"},
    "rankTable": {"format": "hccl", "configMap": "train-ranktable", "configMaps": ["train-ranktable"],
                  "restart": 1, "ready": True, "reason": "Completed"},
    "gang": {"podGroup": "train-1", "minCount": 2},
    "conditions": [{"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "",
                    "lastTransitionTime": "2026-11-21T11:50:00Z", "observedGeneration": 3}],
}


# ---- reading and writing ------------------------------------------------------------------------

@pytest.mark.parametrize("stored", [STORED, {}, {"phase": "Pending", "conditions": []},
                                    {"progress": {}, "restartsByReason": {}},
                                    {"completionTime": "2026-11-21T13:00:00Z"}],
                         ids=["every-field", "new-job", "empty-list", "empty-objects", "one-field"])
def test_a_stored_status_reads_back_exactly_as_written(stored: dict[str, Any]) -> None:
    original = copy.deepcopy(stored)
    assert JobStatus.from_dict(stored).to_dict() == original
    assert stored == original  # the caller's (cached) body is not touched


def test_the_typed_fields_say_what_the_wire_says() -> None:
    status = JobStatus.from_dict(STORED)
    assert (status.phase, status.generation, status.failure_restarts) == ("Running", 1, 1)
    assert status.last_failure == LastFailure(rank=1, pod="train-rank-1", node="node-a", container="trainer",
                                              exit_code=137, reason="OOMKilled", message="", restart=0,
                                              time="2026-11-21T11:40:00Z")
    assert status.progress is not None and status.progress.slowest_rank == SlowestRank(rank=1, ratio=1.8)
    assert status.gang == Gang(pod_group="train-1", min_count=2)
    assert status.avoid_nodes is not None and status.avoid_nodes.nodes == ("node-a",)
    assert status.is_true("Running") and not status.is_true("Stalled") and status.condition("Stalled") is None


def test_a_new_job_has_generation_zero_and_nothing_set() -> None:
    assert JobStatus.from_dict(None) == JobStatus.from_dict({}) == JobStatus()
    assert JobStatus().generation == 0 and JobStatus().to_dict() == {}


def test_unset_fields_are_left_out_and_names_are_camel_case_on_the_wire() -> None:
    status = JobStatus(phase="Failed", last_failure=LastFailure(exit_code=1, rank=0),
                       conditions=(Condition(type="Failed", status="True", last_transition_time="t"),))
    assert status.to_dict() == {"phase": "Failed", "lastFailure": {"rank": 0, "exitCode": 1},
                                "conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": "t"}]}


@pytest.mark.parametrize("stored, expected", [
    ({"phase": "Running", "efficiency": 0.93, "nextGangPlan": {"at": "x"}}, {"phase": "Running"}),
    ({"progress": {"step": 5, "tokensPerSecond": 9.5}}, {"progress": {"step": 5}}),
    ({"conditions": [{"type": "Running", "status": "True", "severity": "Info"}]},
     {"conditions": [{"type": "Running", "status": "True"}]}),
    ({"restarts": "3", "progress": "soon", "conditions": {"type": "Running"}, "gang": None}, {}),
    ({"conditions": ["Running", {"type": "Running"}], "avoidNodes": {"nodes": "node-a"}},
     {"conditions": [{"type": "Running"}], "avoidNodes": {}}),
    ({"restarts": True, "progress": {"loss": 1, "percent": 4.5}, "rankTable": {"ready": "yes"}},
     {"progress": {"loss": 1}, "rankTable": {}}),
], ids=["newer-top-level-fields", "newer-nested-field", "newer-condition-field", "wrong-shapes",
        "wrong-list-items", "wrong-scalars"])
def test_an_older_or_newer_status_never_crashes_a_read(stored: dict[str, Any], expected: dict[str, Any]) -> None:
    assert JobStatus.from_dict(stored).to_dict() == expected


def test_a_write_keeps_the_top_level_fields_a_newer_operator_wrote() -> None:
    stored = {"phase": "Running", "efficiency": {"ratio": 0.93}, "restarts": 1}
    new = JobStatus.from_dict(stored)
    written = wire_status(JobStatus(phase="Restarting", restarts=2, progress=Progress(step=3)), stored)
    assert written == {"phase": "Restarting", "restarts": 2, "progress": {"step": 3}, "efficiency": {"ratio": 0.93}}
    assert status_patch(stored, wire_status(new, stored)) == {}


def test_a_pass_keeps_what_a_newer_operator_wrote_and_changes_what_it_decides() -> None:
    stored = {**STORED, "efficiency": {"ratio": 0.93}, "restartStrategy": "InPlace"}
    pods = [pod(0, restart=1, node="node-b"), pod(1, "Failed", restart=1, exit_code=1)]
    plan = plan_job(JobBuilder().replicas(2).job(), stored, pods, datetime(2026, 11, 21, 12, tzinfo=UTC),
                    DEFAULT_POOLS["cpu"])
    assert plan.status["efficiency"] == {"ratio": 0.93} and plan.status["restartStrategy"] == "InPlace"
    assert (plan.status["phase"], plan.status["restarts"], plan.status["lastFailure"]["rank"]) == ("Restarting", 2, 1)
    assert status_patch(stored, plan.status).keys() >= {"phase", "restarts", "lastFailure"}
    assert "efficiency" not in status_patch(stored, plan.status)


# ---- the merge patch of one status write ----------------------------------------------------------

def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


PATCH_CASES = [
    ("unchanged", STORED, copy.deepcopy(STORED), {}),
    ("new-job", {}, {"phase": "Pending", "restarts": 0}, {"phase": "Pending", "restarts": 0}),
    ("added", {"phase": "Running"}, {"phase": "Running", "completionTime": "t"}, {"completionTime": "t"}),
    ("changed", {"phase": "Running", "restarts": 1}, {"phase": "Restarting", "restarts": 2},
     {"phase": "Restarting", "restarts": 2}),
    ("removed", {"phase": "Suspended", "startTime": "t"}, {"phase": "Suspended"}, {"startTime": None}),
    ("removed-object", {"gang": {"podGroup": "g", "minCount": 2}, "phase": "Succeeded"}, {"phase": "Succeeded"},
     {"gang": None}),
    ("removed-nested-key", {"progress": {"step": 9, "eta": "t", "remaining": "1s"}}, {"progress": {"step": 10}},
     {"progress": {"step": 10, "eta": None, "remaining": None}}),
    ("removed-deeper-key", {"progress": {"step": 9, "slowestRank": {"rank": 1, "ratio": 2.0}}},
     {"progress": {"step": 9, "slowestRank": {"rank": 1}}}, {"progress": {"slowestRank": {"ratio": None}}}),
    ("nested-sibling-unchanged", {"lastFailure": {"rank": 0, "exitCode": 1, "time": "a"}},
     {"lastFailure": {"rank": 1, "exitCode": 1, "time": "b"}}, {"lastFailure": {"rank": 1, "time": "b"}}),
    ("object-added-whole", {"phase": "Running"}, {"phase": "Running", "gang": {"podGroup": "g", "minCount": 2}},
     {"gang": {"podGroup": "g", "minCount": 2}}),
    ("list-replaced", {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]},
     {"conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "False"}]},
     {"conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "False"}]}),
    ("list-emptied", {"avoidNodes": {"nodes": ["a"], "restart": 1}}, {"avoidNodes": {"nodes": [], "restart": 1}},
     {"avoidNodes": {"nodes": []}}),
    ("object-became-scalar", {"message": {"text": "x"}}, {"message": "x"}, {"message": "x"}),
    ("scalar-became-object", {"gang": "g"}, {"gang": {"podGroup": "g"}}, {"gang": {"podGroup": "g"}}),
    ("map-entry-added", {"restartsByReason": {"RankFailed": 1}},
     {"restartsByReason": {"RankFailed": 1, "Preempted": 1}}, {"restartsByReason": {"Preempted": 1}}),
    ("null-in-new-is-removal", {"phase": "Running", "gang": {"podGroup": "g"}}, {"phase": "Running", "gang": None},
     {"gang": None}),
    ("everything-removed", {"phase": "Running", "restarts": 0}, {}, {"phase": None, "restarts": None}),
]


@pytest.mark.parametrize("old, new, expected", [case[1:] for case in PATCH_CASES], ids=[c[0] for c in PATCH_CASES])
def test_the_status_write_sends_only_what_changed(old: dict[str, Any], new: dict[str, Any],
                                                   expected: dict[str, Any]) -> None:
    before = copy.deepcopy((old, new))
    patch = status_patch(old, new)
    assert patch == expected
    assert merge_patch(old, patch) == {k: v for k, v in new.items() if v is not None}  # the server ends at `new`
    assert (old, new) == before  # neither input is changed


def test_the_patch_does_not_share_objects_with_the_new_status() -> None:
    new = {"gang": {"podGroup": "g"}, "conditions": [{"type": "A"}]}
    patch = status_patch({}, new)
    patch["gang"]["podGroup"] = "other"
    patch["conditions"][0]["type"] = "B"
    assert new == {"gang": {"podGroup": "g"}, "conditions": [{"type": "A"}]}
