"""Deadline policy: ``activeDeadlineSeconds`` bounds the whole run, restarts included."""

from __future__ import annotations

from datetime import datetime, timedelta

from dpjob_operator.api.spec import Job
from dpjob_operator.api.status import JobStatus
from dpjob_operator.api.timestamps import parse_iso
from dpjob_operator.reconcile import reasons as r


def deadline_due(job: Job, status: JobStatus) -> datetime | None:
    """When the running job runs out of time (None: no deadline, not started, or finished)."""
    seconds = job.spec.run_policy.active_deadline_seconds
    start = parse_iso(status.start_time)
    if not seconds or start is None or status.phase in r.TERMINAL:
        return None
    return start + timedelta(seconds=seconds)


def deadline_exceeded(job: Job, status: JobStatus, now: datetime) -> str | None:
    """The failure message once the deadline passed, else None."""
    due = deadline_due(job, status)
    if due is None or now < due:
        return None
    return f"the job ran longer than spec.runPolicy.activeDeadlineSeconds={job.spec.run_policy.active_deadline_seconds}"
