"""The scratch state of one planning pass, shared by the policy modules.

Each policy reads the job and the observed pods and writes into ``status``, ``actions`` and
``events`` through the small helpers here, so conditions and phase changes are recorded the
same way everywhere (a phase change always comes with its Event). ``status`` is a typed
``JobStatus`` (api/status.py), frozen: a policy replaces it (``dataclasses.replace``), so
``old``, what the pass began with, stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from dpjob_operator.api.kueue import Placement
from dpjob_operator.api.observed import GangObservation, NodeView, PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.api.status import JobStatus, wire_status
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile.actions import Action, Event, Plan, ReleaseGang
from dpjob_operator.reconcile.conditions import set_condition


class PassContext:
    """Mutable state of one planning pass: the job, the status being built, actions, events."""

    def __init__(self, job: Job, status: Mapping[str, Any], now: datetime,
                 gang: GangObservation | None = None, nodes: NodeView | None = None) -> None:
        self.job = job
        self.old = JobStatus.from_dict(status)  # what the pass began with
        self.status = self.old                   # replaced (never changed in place) by the policies
        self._stored = dict(status)              # for the fields JobStatus does not know: kept as they are
        self.now = now
        self.now_s = iso(now)
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.gang = gang
        self.nodes = nodes  # what is known of the nodes of stuck pods and failed ranks
        self.wake_after: float | None = None
        self.admission: Placement | None = None  # where Kueue admitted the job: on every pod created

    @property
    def generation(self) -> int:
        """The gang generation: status.restarts, carried by every pod's restart label."""
        return self.status.generation

    @property
    def pod_generation(self) -> int:
        """The generation the current gang's pods were created in: their ``dpjob.io/restart`` label."""
        return self.status.pod_generation

    def release_gang(self) -> None:
        """Nothing left to schedule: drop the PodGroup and Workload (once; status remembers)."""
        if self.status.gang is not None:
            self.status = replace(self.status, gang=None)
            self.actions.append(ReleaseGang())

    def cond(self, type_: str, value: bool, reason: str, message: str) -> None:
        conditions = set_condition(self.status.conditions or (), type_, value, reason, message, self.now_s,
                                   self.job.generation)
        self.status = replace(self.status, conditions=conditions)

    def phase(self, phase: str, reason: str, message: str, event_type: str = "Normal") -> None:
        """Set phase/reason/message; a change of (phase, reason) is announced by an Event."""
        if (self.status.phase, self.status.reason) != (phase, reason):
            self.events.append(Event(event_type, reason, message))
        self.status = replace(self.status, phase=phase, reason=reason, message=message)

    def say(self, message: str) -> None:
        """Set the status message alone (the phase stays)."""
        self.status = replace(self.status, message=message)

    def wake_within(self, seconds: float) -> None:
        """Ask to be looked at again within ``seconds`` (the earliest request wins)."""
        seconds = max(0.0, seconds)
        self.wake_after = seconds if self.wake_after is None else min(self.wake_after, seconds)

    def count(self, current: Sequence[PodObservation]) -> None:
        """The replica counters of status (what ``kubectl get`` shows as READY)."""
        live = [p for p in current if not p.deleting]
        ready = sum(1 for p in live if p.phase == "Running" and p.ready)
        self.status = replace(
            self.status,
            replicas=len(live),
            ready_replicas=ready,
            running_replicas=sum(1 for p in live if p.phase == "Running"),
            succeeded_replicas=sum(1 for p in live if p.phase == "Succeeded"),
            failed_replicas=sum(1 for p in live if p.phase == "Failed"),
            ready=f"{ready}/{self.job.spec.replicas}",
        )

    def plan(self) -> Plan:
        return Plan(wire_status(self.status, self._stored), self.actions, self.events, self.wake_after)
