"""The planner's vocabulary: what a pass may ask the executor to do, and what it returns.

Actions are plain frozen records; the executor maps each type to its API calls through a
dispatch table, so adding a child object means one action here and one handler there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpjob_operator.api.kueue import Placement
from dpjob_operator.api.status import JobStatus


@dataclass(frozen=True)
class CreatePods:
    indexes: tuple[int, ...]
    restart: int
    pod_group: str | None = None   # the gang's PodGroup, when gang-scheduled
    avoid_nodes: tuple[str, ...] = ()  # nodes this generation must not use (reconcile/placement.py)
    in_place: bool = False  # with restart rules: a retriable exit restarts the pod in place (builders/restart_rules.py)
    admission: Placement | None = None  # where Kueue admitted the job (reconcile/kueue_gate.py)


@dataclass(frozen=True)
class DeletePods:
    names: tuple[str, ...]
    reason: str
    force: bool = False  # grace period 0: for pods stuck on a node that is down (reconcile/stuck.py)


@dataclass(frozen=True)
class EnsureService:
    """The headless Service every rank resolves its peers through."""


@dataclass(frozen=True)
class EnsureNetworkPolicy:
    """The job's NetworkPolicy as ``spec.isolation`` says (made, or deleted on opt-out); the
    operator's config may turn policies off (controller/network_policies.py)."""


@dataclass(frozen=True)
class EnsureEnvironment:
    """The ConfigMap of the variables every rank shares exists and says what the spec says
    (builders/shared_env.py); the rank pods read it through ``envFrom``."""


@dataclass(frozen=True)
class ApplyRankTable:
    files: Mapping[str, str]


@dataclass(frozen=True)
class DeleteJob:
    reason: str


@dataclass(frozen=True)
class EnsureGang:
    """The Workload and this generation's PodGroup exist (older generations' PodGroups go)."""

    restart: int
    min_count: int


@dataclass(frozen=True)
class ReleaseGang:
    """No PodGroup or Workload of the job remains (terminal or suspended: nothing to schedule)."""


@dataclass(frozen=True)
class EnsureKueueWorkload:
    """The job's Kueue Workload exists (builders/kueue_workload.py, with the priority of its class)."""


@dataclass(frozen=True)
class PatchKueueWorkload:
    """A JSON merge patch of the job's Kueue Workload (``status``: of its status subresource), made
    from the Workload as observed and carrying its resourceVersion: a 409 waits for the next pass."""

    name: str
    patch: Mapping[str, Any]
    status: bool
    why: str


@dataclass(frozen=True)
class DeleteKueueWorkload:
    """Delete the job's Kueue Workload (it no longer describes the job; a new one is made next)."""

    name: str
    why: str


Action = (CreatePods | DeletePods | EnsureService | EnsureNetworkPolicy | EnsureEnvironment | ApplyRankTable
          | DeleteJob | EnsureGang | ReleaseGang | EnsureKueueWorkload | PatchKueueWorkload | DeleteKueueWorkload)


@dataclass(frozen=True)
class Event:
    type: str      # Normal | Warning
    reason: str
    message: str


@dataclass
class Plan:
    """One pass's decision: the status to write first, then the actions, then the events.

    ``wake_after``: seconds after which the job must be looked at again even if nothing changes
    (a policy waiting for something time-bound, e.g. the root cause of a failure).
    """

    status: dict[str, Any]    # the wire form, as written
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wake_after: float | None = None

    @property
    def job_status(self) -> JobStatus:
        """``status``, typed."""
        return JobStatus.from_dict(self.status)
