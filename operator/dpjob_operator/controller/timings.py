"""The job-level metrics a pass feeds: phase transitions, restarts by reason, and gang timings.

A gang's clock starts when its pods are first created for a generation (or a restart is
decided) and stops twice: all pods created (``dpjob_time_to_all_pods_created_seconds``) and the
job Running (``dpjob_time_to_all_ranks_running_seconds``). Each is observed once per
(job uid, generation), so a resync of a Running job does not count it again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from dpjob_operator import metrics
from dpjob_operator.api.spec import Job
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
        new_phase = plan.status.get("phase")
        if new_phase != old.get("phase") and new_phase:
            metrics.TRANSITIONS.labels(new_phase).inc()
        restarts_old = old.get("restartsByReason") or {}
        for reason, count in (plan.status.get("restartsByReason") or {}).items():
            if count > restarts_old.get(reason, 0):
                metrics.RESTARTS.labels(reason).inc(count - restarts_old.get(reason, 0))
        gang = (job.uid, int(plan.status.get("restarts", 0)))
        if new_phase == "Running" and gang not in self._running and gang in self._start:
            self._running.add(gang)
            metrics.TIME_TO_RUNNING.observe(time.monotonic() - self._start[gang])
        if new_phase == "Restarting" and old.get("phase") != "Restarting":
            self._start.setdefault(gang, time.monotonic())

    def forget(self, uid: str) -> None:
        """Drop the job's gangs (it was deleted), so a long-lived operator does not grow."""
        for gang in [g for g in self._start if g[0] == uid]:
            del self._start[gang]
        self._created = {g for g in self._created if g[0] != uid}
        self._running = {g for g in self._running if g[0] != uid}
