"""Status for a job the operator cannot act on: an invalid spec, or rank pods the cluster refused.

Both are decided outside ``plan_job`` (an invalid spec never parses into a ``Job``; a refusal is
only known after the create call), yet they are status decisions like any other, so they live
here, pure, and the controller only writes what these return and then posts the event. Each
returns a ``Plan`` without actions: the new status and the Event announcing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from dpjob_operator.api.status import JobStatus, wire_status
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.actions import Event, Plan
from dpjob_operator.reconcile.conditions import set_condition


def invalid_spec_status(body_status: Mapping[str, Any], message: str, now: datetime, generation: int) -> Plan:
    """The job is Failed for good: its spec cannot be read, and the message says which field to fix.

    Terminal (``completionTime`` set) because no retry can help until the user edits the spec.
    """
    now_s = iso(now)
    status = JobStatus.from_dict(body_status)
    conditions = set_condition(status.conditions or (), r.FAILED, True, r.INVALID_SPEC, message, now_s, generation)
    status = replace(status, conditions=conditions, phase=r.FAILED, reason=r.INVALID_SPEC, message=message,
                     completion_time=now_s)
    return Plan(wire_status(status, body_status), [], [Event("Warning", r.INVALID_SPEC, message)])


def create_refused_message(failed: int, total: int, server_message: str) -> str:
    """What the user reads: how many ranks were refused, and the API server's own reason."""
    return f"creating rank pods failed ({failed} of {total}): {server_message}"


def create_refused_status(body_status: Mapping[str, Any], message: str, now: datetime, generation: int,
                          reason: str = r.FAILED_CREATE_POD, condition: str = r.CREATED) -> Plan:
    """``Created=False/FailedCreatePod``: the cluster refused the rank pods (quota, admission, an invalid
    template); or ``RankTableReady=False/RankTableWriteFailed`` for a refused rank-table ConfigMap. The
    phase is left alone: the controller keeps retrying with backoff, and the objects appear as soon as
    the user (or the admin) fixes the cause."""
    status = JobStatus.from_dict(body_status)
    conditions = set_condition(status.conditions or (), condition, False, reason, message, iso(now), generation)
    status = replace(status, conditions=conditions)
    return Plan(wire_status(status, body_status), [], [Event("Warning", reason, message)])


def recover_fixed_spec(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """A job Failed with InvalidSpec whose spec now parses starts over: the user fixed it.

    InvalidSpec is terminal only until the spec is edited (kubectl apply of a fixed manifest);
    the Job controller's validation works the same way. Returns the status to plan from, or None
    when there is nothing to recover.
    """
    typed = JobStatus.from_dict(status)
    if typed.phase != r.FAILED or typed.reason != r.INVALID_SPEC:
        return None
    fresh = replace(typed, phase=None, reason=None, message=None, completion_time=None,
                    conditions=tuple(c for c in typed.conditions or () if c.type != r.FAILED))
    return wire_status(fresh, status)
