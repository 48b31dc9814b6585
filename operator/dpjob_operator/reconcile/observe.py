"""What the operator knows about one rank pod, extracted from the API object (pure).

The pod cache keeps only these small records, not whole pod bodies: the API server's
managedFields alone would make a 1,000-rank job's cache grow by megabytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from dpjob_operator.api import constants as c

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

    @property
    def active(self) -> bool:
        return not self.deleting and self.phase in ("Pending", "Running", "Unknown")


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


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
    exit_code = None
    reason = status.get("reason")
    message = status.get("message")
    statuses = status.get("containerStatuses") or []
    # The trainer's exit code is the one that matters; otherwise the first non-zero.
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
        if cs.get("name") == c.TRAINER_CONTAINER and code:
            break
    if reason in DISRUPTION_REASONS:
        disrupted = True
    annotations = meta.get("annotations") or {}
    return PodObservation(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        index=_int(labels.get(c.LABEL_RANK)),
        restart=_int(labels.get(c.LABEL_RESTART), 0),
        phase=status.get("phase") or "Pending",
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
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
        annotations={k: v for k, v in annotations.items() if k.startswith("ascend.") or k.startswith("huawei.com/")},
    )
