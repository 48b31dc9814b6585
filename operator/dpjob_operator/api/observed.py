"""What the operator knows about one rank pod, extracted from the API object (pure).

The pod cache keeps only these small records, not whole pod bodies: the API server's
managedFields alone would make a 1,000-rank job's cache grow by megabytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api.kueue import Flavor, WorkloadState
from dpjob_operator.api.restart_counter import COUNTER_CONTAINER, previous_exit

DISRUPTION_REASONS = frozenset({"Evicted", "Preempting", "Preempted", "Shutdown", "NodeShutdown", "Terminated",
                                "DeletionByTaintManager", "TerminationByKubelet"})


@dataclass(frozen=True)
class PodObservation:
    name: str
    uid: str
    index: int
    restart: int
    phase: str
    ready: bool = False
    deleting: bool = False
    node: str | None = None
    pod_ip: str | None = None
    host_ip: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    disrupted: bool = False
    unschedulable: str | None = None  # the scheduler's message when PodScheduled=False/Unschedulable
    replicas_annotation: int | None = None
    pod_group: str | None = None  # spec.schedulingGroup.podGroupName: the gang it was created into
    annotations: Mapping[str, str] = field(default_factory=dict)
    # When the trainer container terminated (RFC 3339, whole seconds): the first rank to die is
    # the root cause, the others usually lost it as a peer (see reconcile/rootcause.py).
    finished_at: str | None = None
    # The uid of the pod's controller (ownerReferences[controller=true]); a job claims only
    # pods whose controller is the job itself (see reconcile/claims.py).
    owner_uid: str | None = None
    container: str | None = None  # the container whose termination decided (the trainer first)
    # Why a container of a not-yet-running pod waits (kubelet's state.waiting: ErrImagePull,
    # CreateContainerConfigError, ...) as "reason: message", init containers first; None otherwise.
    waiting: str | None = None
    # metadata.deletionTimestamp: when the kubelet's grace period ends (RFC 3339); None unless deleting.
    deletion_timestamp: str | None = None
    # Restarts in place (builders/restart_rules.py): the trainer container's restartCount, and how its
    # previous run ended as the restart counter recorded it (None: unknown or not recorded yet).
    in_place: int = 0
    in_place_exit: int | None = None

    @property
    def active(self) -> bool:
        return not self.deleting and self.phase in ("Pending", "Running", "Unknown")

    @property
    def holds_resources(self) -> bool:
        """Not yet Succeeded or Failed, deleting or not: its node may still hold its resources (Kueue's
        quota stays held until no pod of the job does)."""
        return self.phase in ("Pending", "Running", "Unknown")

    @property
    def gang_generation(self) -> int:
        """The gang generation this pod runs: the one it was created in plus its restarts in place."""
        return self.restart + self.in_place


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _termination(status: Mapping[str, Any]) -> tuple[int | None, str | None, str | None, str | None, str | None]:
    """(exit code, reason, message, finishedAt, container) of the container that decides the rank's fate.

    The trainer's exit code is the one that matters; otherwise the first non-zero.
    """
    exit_code: int | None = None
    finished_at: str | None = None
    container: str | None = None
    reason: str | None = status.get("reason")
    message: str | None = status.get("message")
    statuses = status.get("containerStatuses") or []
    ordered = sorted(statuses, key=lambda s: s.get("name") != c.TRAINER_CONTAINER)
    for cs in ordered:
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term is None:
            continue
        code = term.get("exitCode")
        if exit_code is None or (exit_code == 0 and code):
            exit_code = code
            reason = term.get("reason") or reason
            message = term.get("message") or message
            finished_at = term.get("finishedAt") or finished_at
            container = cs.get("name")
        if cs.get("name") == c.TRAINER_CONTAINER and code:
            break
    return exit_code, reason, message, finished_at, container


def _waiting(status: Mapping[str, Any]) -> str | None:
    """The first waiting container's reason (and message), init containers first, the trainer next."""
    for key in ("initContainerStatuses", "containerStatuses"):
        statuses = sorted(status.get(key) or [], key=lambda s: s.get("name") != c.TRAINER_CONTAINER)
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                message = waiting.get("message")
                return f"{waiting['reason']}: {message}" if message else str(waiting["reason"])
    return None


def _in_place(status: Mapping[str, Any]) -> tuple[int, int | None]:
    """(restarts in place, the previous run's exit code) from the trainer's and the counter's status."""
    trainer: Mapping[str, Any] = next((cs for cs in status.get("containerStatuses") or []
                                       if cs.get("name") == c.TRAINER_CONTAINER), {})
    counter: Mapping[str, Any] = next((cs for cs in status.get("initContainerStatuses") or []
                    if cs.get("name") == COUNTER_CONTAINER), {})
    message = (((counter.get("state") or {}).get("terminated")) or {}).get("message")
    return _int(trainer.get("restartCount"), 0), previous_exit(message)


def _controller_uid(meta: Mapping[str, Any]) -> str | None:
    refs = meta.get("ownerReferences") or []
    return next((str(r.get("uid")) for r in refs if r.get("controller")), None)


def observe_pod(pod: Mapping[str, Any]) -> PodObservation | None:
    """Reduce a pod dict (camelCase, as the API serves it) to a ``PodObservation``.

    Returns None for a pod without our rank label: it is not ours to reason about.
    """
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if c.LABEL_RANK not in labels:
        return None
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(cd.get("type") == "Ready" and cd.get("status") == "True" for cd in conditions)
    disrupted = any(cd.get("type") == "DisruptionTarget" and cd.get("status") == "True" for cd in conditions)
    unschedulable = next((cd.get("message") or "Unschedulable" for cd in conditions
                          if cd.get("type") == "PodScheduled" and cd.get("reason") == "Unschedulable"), None)
    exit_code, reason, message, finished_at, container = _termination(status)
    if reason in DISRUPTION_REASONS:
        disrupted = True
    annotations = meta.get("annotations") or {}
    in_place, in_place_exit = _in_place(status)
    return PodObservation(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        index=_int(labels.get(c.LABEL_RANK)),
        restart=_int(labels.get(c.LABEL_RESTART), 0),
        phase=status.get("phase") or "Pending",
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        deletion_timestamp=meta.get("deletionTimestamp"),
        node=(pod.get("spec") or {}).get("nodeName"),
        pod_ip=status.get("podIP"),
        host_ip=status.get("hostIP"),
        exit_code=exit_code,
        reason=reason,
        message=message,
        disrupted=disrupted,
        unschedulable=unschedulable,
        replicas_annotation=_int(annotations.get(c.ANNOTATION_REPLICAS), 0) or None,
        pod_group=((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName"),
        finished_at=finished_at,
        owner_uid=_controller_uid(meta),
        container=container,
        waiting=_waiting(status) if (status.get("phase") or "Pending") == "Pending" else None,
        annotations={k: v for k, v in annotations.items() if k.startswith(("ascend.", "huawei.com/"))},
        in_place=in_place,
        in_place_exit=in_place_exit,
    )


@dataclass(frozen=True)
class GangObservation:
    """Gang scheduling is in effect for this job (see builders.gang)."""

    min_count: int
    # The scheduler's PodGroupScheduled condition on the current generation's PodGroup, or None
    # while it has not judged it (or nobody looked, because every rank is already bound).
    scheduled: Mapping[str, Any] | None = None


# What the operator knows of a node holding a rank (k8s/nodes.py, k8s/nodecache.py).
NODE_READY, NODE_NOT_READY, NODE_GONE, NODE_UNKNOWN = "Ready", "NotReady", "Gone", "Unknown"


@dataclass(frozen=True)
class NodeView:
    """The nodes the planner may need to judge: those of pods stuck Terminating (and when a pod
    counts as stuck: ``stuck_after`` seconds past its deletion deadline), those of failed ranks
    (a restarted gang avoids a node that is down or tainted by a health tool) and, while the node
    watch runs, those of the current gang's ranks (a node lost under a running gang:
    reconcile/node_loss.py)."""

    stuck_after: float
    health: Mapping[str, str] = field(default_factory=dict)
    # Per node: the NoSchedule/NoExecute taints the job's pods do not tolerate (a health tool's).
    taints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Per node: the keys of all its NoExecute taints, tolerated or not (every pod tolerates the node
    # lifecycle controller's for 300 s, which is the wait a lost node must not cost).
    no_execute: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class RankTableOutcome:
    """What the rank-table builder said about the current gang (None when disabled)."""

    ready: bool
    reason: str
    message: str
    format: str
    files: Mapping[str, str]
    # (reason, message) of the last failed write of these files (the API server's words, or the
    # name of the object holding the ConfigMap's name), or None: a table not stored is not ready.
    write_error: tuple[str, str] | None = None


@dataclass(frozen=True)
class KueueObservation:
    """Kueue queues this job (the operator's integration is on and the job names a LocalQueue, or
    its Workload still exists): the Workload as the watch last saw it (controller/kueue.py)."""

    workload_name: str
    # As served (resourceVersion, conditions: the patches are made from it); None: not made yet, or gone.
    workload: Mapping[str, Any] | None = None
    state: WorkloadState | None = None     # ``workload``, typed (api/kueue.parse_workload)
    # The ResourceFlavors its admission names, as read; one missing here was not found.
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
