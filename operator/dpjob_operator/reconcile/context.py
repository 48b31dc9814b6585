"""The scratch state of one planning pass, shared by the policy modules.

Each policy reads the job and the observed pods and writes into ``status``, ``actions`` and
``events`` through the small helpers here, so conditions and phase changes are recorded the
same way everywhere (a phase change always comes with its Event).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dpjob_operator.api.observed import GangObservation, NodeView, PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.api.timestamps import iso
from dpjob_operator.reconcile.actions import Action, Event, Plan, ReleaseGang
from dpjob_operator.reconcile.conditions import set_condition


class PassContext:
    """Mutable state of one planning pass: the job, the status being built, actions, events."""

    def __init__(self, job: Job, status: Mapping[str, Any], now: datetime,
                 gang: GangObservation | None = None, nodes: NodeView | None = None) -> None:
        self.job = job
        self.old = dict(status)
        self.status: dict[str, Any] = copy.deepcopy(dict(status))
        self.now = now
        self.now_s = iso(now)
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.gang = gang
        self.nodes = nodes  # what is known of the nodes of stuck pods and failed ranks
        self.wake_after: float | None = None

    @property
    def generation(self) -> int:
        """The gang generation: status.restarts, carried by every pod's restart label."""
        return int(self.status.get("restarts", 0))

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return list(self.status.get("conditions") or [])

    def release_gang(self) -> None:
        """Nothing left to schedule: drop the PodGroup and Workload (once; status remembers)."""
        if self.status.pop("gang", None) is not None:
            self.actions.append(ReleaseGang())

    def cond(self, type_: str, value: bool, reason: str, message: str) -> None:
        self.status["conditions"] = set_condition(self.conditions, type_, value, reason, message,
                                                  self.now_s, self.job.generation)

    def phase(self, phase: str, reason: str, message: str, event_type: str = "Normal") -> None:
        """Set phase/reason/message; a change of (phase, reason) is announced by an Event."""
        if (self.status.get("phase"), self.status.get("reason")) != (phase, reason):
            self.events.append(Event(event_type, reason, message))
        self.status.update(phase=phase, reason=reason, message=message)

    def wake_within(self, seconds: float) -> None:
        """Ask to be looked at again within ``seconds`` (the earliest request wins)."""
        seconds = max(0.0, seconds)
        self.wake_after = seconds if self.wake_after is None else min(self.wake_after, seconds)

    def count(self, current: Sequence[PodObservation]) -> None:
        """The replica counters of status (what ``kubectl get`` shows as READY)."""
        live = [p for p in current if not p.deleting]
        ready = sum(1 for p in live if p.phase == "Running" and p.ready)
        self.status.update(
            replicas=len(live),
            readyReplicas=ready,
            runningReplicas=sum(1 for p in live if p.phase == "Running"),
            succeededReplicas=sum(1 for p in live if p.phase == "Succeeded"),
            failedReplicas=sum(1 for p in live if p.phase == "Failed"),
            ready=f"{ready}/{self.job.spec.replicas}",
        )

    def plan(self) -> Plan:
        return Plan(self.status, self.actions, self.events, self.wake_after)
