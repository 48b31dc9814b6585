"""The job-level metrics a pass feeds: phase transitions, restarts by reason, and gang timings.

A gang's clock starts when its pods are first created for a generation (or a restart is
decided) and stops twice: all pods created (``dpjob_time_to_all_pods_created_seconds``) and the
job Running (``dpjob_time_to_all_ranks_running_seconds``). Each is observed once per
(job uid, generation), so a resync of a Running job does not count it again. A restart's
detection and recovery times come from status.goodput as its entry opens and closes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from dpjob_operator import metrics
from dpjob_operator.api.spec import Job
from dpjob_operator.api.status import Goodput, GoodputRestart, JobStatus
from dpjob_operator.reconcile.actions import Plan

Gang = tuple[str, int]  # (job uid, restart generation)


class Timings:
    def __init__(self) -> None:
        self._start: dict[Gang, float] = {}     # monotonic start of each gang
        self._created: set[Gang] = set()        # gangs whose all-created time was observed
        self._running: set[Gang] = set()        # gangs whose all-running time was observed

    def gang_started(self, uid: str, restart: int) -> None:
        """Start the gang's clock, unless it already runs (a later pass creating missing ranks)."""
        self._start.setdefault((uid, restart), time.monotonic())

    def gang_created(self, uid: str, restart: int) -> None:
        """Every pod of the gang exists: observe the time to get there, once."""
        gang = (uid, restart)
        if gang in self._created or gang not in self._start:
            return
        self._created.add(gang)
        metrics.TIME_TO_CREATED.observe(time.monotonic() - self._start[gang])

    def observe_pass(self, job: Job, old: Mapping[str, Any], plan: Plan) -> None:
        """Count what this pass changed: a phase entered, restarts by reason, a gang now Running."""
        before, new = JobStatus.from_dict(old), plan.job_status
        new_phase = new.phase
        if new_phase != before.phase and new_phase:
            metrics.TRANSITIONS.labels(new_phase).inc()
        restarts_old = before.restarts_by_reason or {}
        for reason, count in (new.restarts_by_reason or {}).items():
            if count > restarts_old.get(reason, 0):
                metrics.RESTARTS.labels(reason).inc(count - restarts_old.get(reason, 0))
        strategies_old = before.restarts_by_strategy or {}
        for strategy, count in (new.restarts_by_strategy or {}).items():
            if count > strategies_old.get(strategy, 0):
                metrics.RESTARTS_BY_STRATEGY.labels(strategy).inc(count - strategies_old.get(strategy, 0))
        gang = (job.uid, new.generation)
        if new_phase == "Running" and gang not in self._running and gang in self._start:
            self._running.add(gang)
            metrics.TIME_TO_RUNNING.observe(time.monotonic() - self._start[gang])
            last = new.last_restart
            if last is not None and last.restart == new.generation and last.strategy:
                metrics.RECOVERY.labels(last.strategy).observe(time.monotonic() - self._start[gang])
        if new_phase == "Restarting" and before.phase != "Restarting":
            self._start.setdefault(gang, time.monotonic())
        observe_goodput(before, new)

    def forget(self, uid: str) -> None:
        """Drop the job's gangs (it was deleted), so a long-lived operator does not grow."""
        for gang in [g for g in self._start if g[0] == uid]:
            del self._start[gang]
        self._created = {g for g in self._created if g[0] != uid}
        self._running = {g for g in self._running if g[0] != uid}


def _entry_key(entry: GoodputRestart) -> tuple[int | None, str | None, str | None]:
    """A restart entry's identity: its generation, and for warm restarts (several in one generation)
    also when it failed."""
    return entry.restart, entry.strategy, entry.failed_time if entry.strategy == "Warm" else None


def observe_goodput(before: JobStatus, new: JobStatus) -> None:
    """A restart entry of status.goodput opened (its detection time) or closed (its recovery time)."""
    old = {_entry_key(e): e for e in (before.goodput or Goodput()).restarts or ()}
    for entry in (new.goodput or Goodput()).restarts or ():
        was = old.get(_entry_key(entry))
        strategy = entry.strategy or "Unknown"
        if was is None and entry.detect_seconds is not None:
            metrics.RESTART_DETECT.labels(strategy).observe(entry.detect_seconds)
        if entry.recover_seconds is not None and (was is None or was.recover_seconds is None):
            metrics.RESTART_RECOVER.labels(strategy).observe(entry.recover_seconds)
