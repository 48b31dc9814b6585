"""Typed, immutable view of a DataParallelJob's status: the counterpart of ``api/spec.py``.

One frozen dataclass per object of the CRD's status schema (``crds/dataparalleljob.yaml``;
``tests/unit/test_status_schema.py`` keeps the two in step, field by field). Every field is
optional: None means absent on the wire, so ``JobStatus.from_dict(d).to_dict() == d`` for any
status the API server stores. ``from_dict`` drops keys it does not know and values of the wrong
shape, so a status written by an older or newer operator never crashes a pass.

The wire form is camelCase (``exit_code`` <-> ``exitCode``), derived from the field name
(api/status_wire.py).
``status_patch`` turns two wire forms into the RFC 7386 merge patch that makes one the other.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpjob_operator.api.status_wire import StatusObject

# ---- the objects of the status schema ------------------------------------------------------


@dataclass(frozen=True)
class Condition(StatusObject):
    type: str | None = None
    status: str | None = None           # True | False | Unknown
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


@dataclass(frozen=True)
class SlowestRank(StatusObject):
    rank: int | None = None
    ratio: float | None = None          # its own step time over the median of the ranks'


@dataclass(frozen=True)
class Progress(StatusObject):
    """What rank 0 last reported (reconcile/progress.py)."""

    restart: int | None = None
    step: int | None = None
    total_steps: int | None = None
    percent: int | None = None
    summary: str | None = None
    steps_per_second: float | None = None
    samples_per_second: float | None = None
    eta: str | None = None
    remaining: str | None = None
    loss: float | None = None
    epoch: int | None = None
    last_step_time: str | None = None
    checkpoint_step: int | None = None
    checkpoint_time: str | None = None
    observed_time: str | None = None
    slowest_rank: SlowestRank | None = None


@dataclass(frozen=True)
class AvoidNodes(StatusObject):
    """The nodes gang generation ``restart`` must not use (reconcile/placement.py)."""

    restart: int | None = None
    nodes: tuple[str, ...] | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LastStall(StatusObject):
    reason: str | None = None           # Stalled | StartupTimeout
    step: int | None = None             # None: the gang never reported a step
    restart: int | None = None
    time: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class LastFailure(StatusObject):
    rank: int | None = None
    pod: str | None = None
    node: str | None = None
    container: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    restart: int | None = None
    time: str | None = None
    finished_time: str | None = None    # when the kubelet saw the rank's container end


@dataclass(frozen=True)
class LastRestart(StatusObject):
    restart: int | None = None          # the gang generation it started (Warm: the one it happened in)
    strategy: str | None = None         # InPlace | Recreate | Warm
    reason: str | None = None
    time: str | None = None
    warm_restarts: int | None = None    # Warm: the warm restarts booked in generation ``restart`` so far


@dataclass(frozen=True)
class GoodputRestart(StatusObject):
    """What one gang restart cost (reconcile/goodput.py)."""

    restart: int | None = None          # the gang generation it started (Warm: the one it happened in)
    strategy: str | None = None         # InPlace | Recreate | Warm
    reason: str | None = None
    failed_time: str | None = None      # the failed rank's container ended (else the gang's last step)
    detect_seconds: float | None = None     # failedTime -> the operator booked the restart
    recover_seconds: float | None = None    # failedTime -> the new gang's first step; None until it steps
    steps_recomputed: int | None = None     # steps the failed gang made past the one the new gang resumed at


@dataclass(frozen=True)
class Goodput(StatusObject):
    """The share of the job's wall time spent on steps that count, and what each restart cost."""

    ratio: float | None = None
    startup_seconds: float | None = None    # startTime -> the first gang's first step
    lost_seconds: float | None = None       # startup, recoveries and recomputed steps
    restarts: tuple[GoodputRestart, ...] | None = None  # the latest, oldest first


@dataclass(frozen=True)
class RankTable(StatusObject):
    format: str | None = None
    config_map: str | None = None
    config_maps: tuple[str, ...] | None = None
    restart: int | None = None
    ready: bool | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Gang(StatusObject):
    """The current gang's PodGroup, while the job is gang-scheduled."""

    pod_group: str | None = None
    min_count: int | None = None


@dataclass(frozen=True)
class Kueue(StatusObject):
    """The job's Kueue Workload, while Kueue queues the job (reconcile/kueue_gate.py)."""

    workload: str | None = None         # its name, in the job's namespace
    queue: str | None = None            # the LocalQueue (the job's kueue.x-k8s.io/queue-name label)
    cluster_queue: str | None = None    # the ClusterQueue that admitted it; absent while not admitted
    flavors: tuple[str, ...] | None = None  # the ResourceFlavors of its admission
    evictions: int | None = None        # times Kueue evicted the running job (preemption, ...)


@dataclass(frozen=True)
class JobStatus(StatusObject):
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    observed_generation: int | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    running_replicas: int | None = None
    succeeded_replicas: int | None = None
    failed_replicas: int | None = None
    ready: str | None = None
    selector: str | None = None
    world_size: int | None = None
    restarts: int | None = None
    failure_restarts: int | None = None
    restarts_by_reason: Mapping[str, int] | None = None
    restart_strategy: str | None = None          # InPlace | Recreate, decided once (reconcile/inplace.py)
    recreated_at: int | None = None              # the current pods' generation, once restarted in place
    restarts_by_strategy: Mapping[str, int] | None = None
    last_restart: LastRestart | None = None
    start_time: str | None = None
    completion_time: str | None = None
    progress: Progress | None = None
    avoid_nodes: AvoidNodes | None = None
    last_stall: LastStall | None = None
    last_failure: LastFailure | None = None
    goodput: Goodput | None = None
    rank_table: RankTable | None = None
    gang: Gang | None = None
    kueue: Kueue | None = None
    conditions: tuple[Condition, ...] | None = None

    @property
    def generation(self) -> int:
        """The gang generation: ``restarts``, carried by every pod's restart label."""
        return self.restarts or 0

    @property
    def pod_generation(self) -> int:
        """The generation the current pods were created in (their restart label): ``recreatedAt`` once
        the gang restarted in place (reconcile/inplace.py), else ``restarts``."""
        return self.generation if self.recreated_at is None else self.recreated_at

    def condition(self, type_: str) -> Condition | None:
        return next((cd for cd in self.conditions or () if cd.type == type_), None)

    def is_true(self, type_: str) -> bool:
        cond = self.condition(type_)
        return cond is not None and cond.status == "True"


def wire_status(status: JobStatus, stored: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` to write over ``stored``: its wire form, plus the top-level fields of ``stored`` that
    ``JobStatus`` does not know (a newer operator's) as they are, so a pass never deletes what it
    cannot read."""
    known = {f.wire for f in JobStatus.wire_fields()}
    return {**{k: copy.deepcopy(v) for k, v in stored.items() if k not in known}, **status.to_dict()}
