"""Why a rank failed, in status and the event: the termination message, never "read the logs"."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from dpjob_operator.api.observed import observe_pod
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.termination import TERMINATION_LOG, cause_excerpt
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod
from tests.support.podenv import rank_env

pytestmark = pytest.mark.unit
TRACEBACK = ("Traceback (most recent call last):\n  File \"/src/train.py\", line 3, in <module>\n"
             "    main()\nZeroDivisionError: division by zero")
TORCHELASTIC = json.dumps({"message": {"message": "ZeroDivisionError: division by zero", "extraInfo": {
    "py_callstack": TRACEBACK, "timestamp": "1764000000"}}})


@pytest.mark.parametrize("message, expected", [
    (TRACEBACK, TRACEBACK),                                       # a script that just raises
    (TORCHELASTIC, TRACEBACK),                                    # torchrun's error.json: its traceback
    (json.dumps({"message": {"message": "SignalException: 15"}}), "SignalException: 15"),
    ("x" * 5000 + "\nRuntimeError: boom", None),                  # long logs: the tail survives
    ("", ""),
    (None, ""),
])
def test_the_excerpt_keeps_what_says_why(message, expected):
    got = cause_excerpt(message)
    if expected is None:
        assert len(got) == 1024 and got.endswith("RuntimeError: boom") and got.startswith("…")
    else:
        assert got == expected


def test_every_container_keeps_its_traceback_and_torchrun_writes_its_error_file_there():
    job = (JobBuilder().set("injectEnvInto", "all")
           .set("template", {"spec": {"containers": [
               {"name": "trainer", "image": "t"},
               {"name": "sidecar", "image": "s", "terminationMessagePolicy": "File"}]}}).job())
    containers = build_rank_pod(job, 0, 0, DEFAULT_POOLS["cpu"])["spec"]["containers"]
    assert [c["terminationMessagePolicy"] for c in containers] == ["FallbackToLogsOnError", "File"]
    pod = {"spec": {"containers": containers}}
    for name in ("trainer", "sidecar"):
        assert rank_env(pod, job, DEFAULT_POOLS["cpu"], name)["TORCHELASTIC_ERROR_FILE"] == TERMINATION_LOG


def test_last_failure_names_container_and_cause_and_the_event_says_the_same():
    raw = {"metadata": {"name": "train-rank-1", "uid": "p1", "labels": {"dpjob.io/rank": "1", "dpjob.io/restart": "0"},
                        "ownerReferences": [{"uid": "uid-train", "controller": True}]},
           "spec": {"nodeName": "node-1"},
           "status": {"phase": "Failed", "containerStatuses": [
               {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}},
               {"name": "trainer", "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": TRACEBACK,
                                                            "finishedAt": "2026-11-24T03:00:00Z"}}}]}}
    failed = observe_pod(raw)
    assert failed is not None and failed.container == "trainer"
    now = datetime(2026, 11, 24, 3, 0, 5, tzinfo=UTC)
    plan = plan_job(JobBuilder().job(), {"phase": "Running", "restarts": 0, "startTime": "2026-11-24T02:00:00Z"},
                    [pod(0), failed], now, DEFAULT_POOLS["cpu"])
    last = plan.status["lastFailure"]
    assert (last["rank"], last["container"], last["exitCode"], last["node"]) == (1, "trainer", 1, "node-1")
    assert last["message"].endswith("ZeroDivisionError: division by zero")
    event = next(e for e in plan.events if e.reason == "RankFailed")
    assert event.type == "Warning" and event.message.endswith("ZeroDivisionError: division by zero")


def test_every_last_failure_field_is_in_the_crd_schema():
    """A field the schema lacks is pruned by the API server: the user would never see it."""
    crd = yaml.safe_load(Path("helm/dpjob-operator/files/dataparalleljob.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    failed = pod(1, "Failed", exit_code=1, message="boom", container="trainer")
    plan = plan_job(JobBuilder().job(), {"phase": "Running", "restarts": 0, "startTime": "2026-11-24T02:00:00Z"},
                    [pod(0), failed], datetime(2026, 11, 24, 3, 0, tzinfo=UTC), DEFAULT_POOLS["cpu"])
    assert set(plan.status["lastFailure"]) <= set(schema["lastFailure"]["properties"])
    assert set(plan.status) <= set(schema)
