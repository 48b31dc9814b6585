"""Jobs the operator cannot act on: what `kubectl get/describe dpj` shows for an invalid spec and for
rank pods the cluster refused, and which API errors count as such a refusal."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from dpjob_operator.api.timestamps import iso
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.errors import ApiError
from dpjob_operator.reconcile.actions import Event
from dpjob_operator.reconcile.refusals import create_refused_message, create_refused_status, invalid_spec_status

pytestmark = pytest.mark.unit


def get_condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of ``type_`` as written (the wire form)."""
    return next((c for c in conditions if c.get("type") == type_), None)
EARLIER = datetime(2026, 11, 21, 11, 0, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
RUNNING = {"phase": "Running", "reason": "AllRanksRunning", "restarts": 2, "worldSize": 8,
           "conditions": [{"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "",
                           "lastTransitionTime": iso(EARLIER), "observedGeneration": 3}]}


# ---- InvalidSpec ---------------------------------------------------------------------------

@pytest.mark.parametrize("before", [{}, RUNNING], ids=["new", "running"])
def test_an_invalid_spec_fails_the_job_with_the_field_to_fix(before: dict[str, Any]) -> None:
    message = "spec.replicas must be >= 1, got 0"
    original = copy.deepcopy(before)
    plan = invalid_spec_status(before, message, NOW, generation=4)
    status = plan.status
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "InvalidSpec", message)
    assert status["completionTime"] == iso(NOW)
    failed = get_condition(status["conditions"], "Failed")
    assert failed == {"type": "Failed", "status": "True", "reason": "InvalidSpec", "message": message,
                      "lastTransitionTime": iso(NOW), "observedGeneration": 4}
    assert plan.events == [Event("Warning", "InvalidSpec", message)]
    assert plan.actions == []
    assert before == original  # the caller's (cached) body is not touched


def test_an_invalid_spec_keeps_what_the_status_already_said() -> None:
    status = invalid_spec_status(RUNNING, "bad", NOW, generation=4).status
    assert status["restarts"] == 2 and status["worldSize"] == 8
    assert [c["type"] for c in status["conditions"]] == ["Running", "Failed"]


# ---- FailedCreatePod -------------------------------------------------------------------------

def test_refused_pods_message_counts_ranks_and_quotes_the_server() -> None:
    assert create_refused_message(3, 4, 'pods "train-0" is forbidden: exceeded quota') == \
        'creating rank pods failed (3 of 4): pods "train-0" is forbidden: exceeded quota'


@pytest.mark.parametrize("before, transition", [
    ({}, NOW),
    ({"phase": "Pending", "conditions": [{"type": "Created", "status": "False", "reason": "FailedCreatePod",
                                          "message": "old quota", "lastTransitionTime": iso(EARLIER),
                                          "observedGeneration": 1}]}, EARLIER),  # still False: time stays
    ({"phase": "Restarting", "conditions": [{"type": "Created", "status": "True", "reason": "AllPodsCreated",
                                             "message": "", "lastTransitionTime": iso(EARLIER),
                                             "observedGeneration": 1}]}, NOW),
], ids=["first", "again", "after-created"])
def test_refused_pods_set_created_false_and_leave_the_phase(before: dict[str, Any], transition: datetime) -> None:
    message = "creating rank pods failed (4 of 4): admission webhook denied the request"
    plan = create_refused_status(before, message, NOW, generation=2)
    created = get_condition(plan.status["conditions"], "Created")
    assert created == {"type": "Created", "status": "False", "reason": "FailedCreatePod", "message": message,
                       "lastTransitionTime": iso(transition), "observedGeneration": 2}
    assert plan.status.get("phase") == before.get("phase")  # retried with backoff, not failed
    assert plan.events == [Event("Warning", "FailedCreatePod", message)]
    assert plan.actions == []


# ---- which API errors are refusals (k8s/errors.py) --------------------------------------------

def api_error(status: int, message: str = "", reason: str = "") -> ApiError:
    error = ApiError(status=status, reason=reason)
    error.body = json.dumps({"kind": "Status", "message": message, "reason": reason})  # text, as the client sets it
    return error


@pytest.mark.parametrize("error, refusal, terminating", [
    (api_error(403, 'pods "t-0" is forbidden: exceeded quota: gpu', "Forbidden"), True, False),
    (api_error(422, 'Pod "t-0" is invalid: spec.containers[0].image: Required value', "Invalid"), True, False),
    (api_error(400, "bad request", "BadRequest"), True, False),
    (api_error(403, "unable to create new content in namespace x because it is being terminated",
               "NamespaceTerminating"), True, True),
    (api_error(409, "already exists", "AlreadyExists"), False, False),
    (api_error(500, "etcdserver: request timed out"), False, False),
    (api_error(429, "too many requests"), False, False),
    (TimeoutError("read timed out"), False, False),
])
def test_refusals_are_the_errors_only_the_user_can_fix(error: BaseException, refusal: bool,
                                                       terminating: bool) -> None:
    assert errors.is_refusal(error) is refusal
    assert errors.is_namespace_terminating(error) is terminating


@pytest.mark.parametrize("error, message, described", [
    (api_error(403, "exceeded quota: gpu"), "exceeded quota: gpu", "403 exceeded quota: gpu"),
    (TimeoutError("read timed out"), "read timed out", "read timed out"),
    (api_error(500, "x" * 2000), "x" * 800, "500 " + "x" * 800),
])
def test_users_read_the_servers_message_not_its_json(error: BaseException, message: str, described: str) -> None:
    assert errors.api_message(error) == message
    assert errors.describe(error) == described


def test_a_body_that_is_not_json_is_quoted_as_is() -> None:
    error = ApiError(status=502, reason="Bad Gateway")
    error.body = "upstream connect error"
    assert errors.api_message(error) == "upstream connect error"
    assert errors.status_of(error) == 502 and errors.status_of(ValueError()) is None


def test_a_fixed_spec_starts_the_job_over():
    """InvalidSpec is terminal only until the user edits the spec: then the job runs."""
    from dpjob_operator.api.pools import DEFAULT_POOLS
    from dpjob_operator.reconcile.actions import CreatePods
    from dpjob_operator.reconcile.planner import plan_job
    from tests.support.builders import JobBuilder

    now = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)
    failed = invalid_spec_status({}, "spec.template.spec.containers: needs a container named 'trainer'", now, 1)
    plan = plan_job(JobBuilder().job(), failed.status, [], now, DEFAULT_POOLS["cpu"])
    assert plan.status["phase"] == "Pending" and "completionTime" not in plan.status
    assert not any(c["type"] == "Failed" for c in plan.status["conditions"])
    assert any(isinstance(a, CreatePods) for a in plan.actions)
    assert [e.reason for e in plan.events][:1] == ["SpecFixed"]


def test_scaled_down_ranks_that_end_failed_are_no_failure():
    """Elastic scale-down: the kubelet reports our deleted rank Failed (143); nothing is charged."""
    from dpjob_operator.api.pools import DEFAULT_POOLS
    from dpjob_operator.reconcile.planner import plan_job
    from tests.support.builders import JobBuilder, pod

    now = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)
    job = JobBuilder().elastic(1, 3).replicas(2).job()
    pods = [pod(0), pod(1), pod(2, "Failed", exit_code=143, deleting=True)]
    plan = plan_job(job, {"phase": "Running", "restarts": 0, "startTime": "2026-11-24T02:00:00Z"}, pods, now,
                    DEFAULT_POOLS["cpu"])
    assert plan.status["phase"] == "Running" and plan.status.get("failureRestarts", 0) == 0
    assert "lastFailure" not in plan.status
