"""What Kueue's verdict on a job's Workload means for its rank pods (pure).

``admission_decision`` is the job framework's part of Kueue's reconciler for a job that is not
finished (``jobframework/reconciler.go``): a finished, deleted or evicted Workload stops the gang,
an admitted one runs it, anything else waits, with Kueue's own words for why. An evicted Workload
stops the gang while it still holds quota (``Stop.requeue``: the operator then gives the quota
back, ``builders/kueue_status.requeue_patch``) and waits once it does, until Kueue admits it again.

``placement`` is what starting the job adds to the pods (``jobframework.getPodSetsInfoFromStatus``
and ``podset.Merge``): the assigned ResourceFlavors' node labels and tolerations, the admission
checks' podSetUpdates, Kueue's podset and queue labels. Kueue merges, it never overrides: a key
the pods already select with another value is a conflict, and so is one two sources disagree on.
Kueue then marks the Workload Finished (FailedToStart): the job cannot start as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpjob_operator.api import kueue as k
from dpjob_operator.api.kueue import Placement

_DNS_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class PlacementConflict:
    """The admission cannot be applied to the pods; ``message`` says what to change."""

    key: str
    message: str


@dataclass(frozen=True)
class MissingFlavor:
    """An assigned ResourceFlavor the caller has not read (or that is gone): read it, then decide again."""

    name: str


@dataclass(frozen=True)
class Wait:
    """Keep the gang down: not admitted (yet)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Run:
    placement: Placement


@dataclass(frozen=True)
class Stop:
    """Delete the gang: evicted (``reason``: Preempted, PodsReadyTimeout, ClusterQueueStopped, ...) while
    the quota is still held, the Workload deleted or finished, or the admission impossible to apply
    (FailedToStart: mark the Workload finished with that reason, as Kueue does)."""

    reason: str
    message: str
    #: An eviction: once no rank pod is left, give the quota back (builders/kueue_status.requeue_patch).
    requeue: bool = False


Decision = Wait | Run | Stop

WORKLOAD_DELETED, QUEUED, CHECKS_PENDING = "WorkloadDeleted", "Queued", "AdmissionChecksPending"


_PODS = "the rank pods' nodeSelector"


def _advice(key: str, holder: str) -> str:
    if holder == _PODS:
        return (f"drop {key} from spec.template.spec.nodeSelector (or from the operator's node pool), or queue "
                "the job where the flavor agrees with it")
    return f"the cluster's Kueue configuration gives contradicting values for {key}: ask its administrator"


def _merge(into: dict[str, str], extra: Mapping[str, str], what: str, source: str,
           origin: dict[str, str]) -> PlacementConflict | None:
    """``into`` |= ``extra``, refusing a key already there with another value (podset.Merge)."""
    for key, value in sorted(extra.items()):
        if key in into and into[key] != value:
            holder = origin.get(key, "Kueue")
            return PlacementConflict(key, f"Kueue's admission cannot be applied to the rank pods: {source} sets "
                                          f"{what} {key}={value}, but {holder} already sets {key}={into[key]}; "
                                          + _advice(key, holder))
        into[key] = value
        origin.setdefault(key, source)
    return None


def _add_tolerations(into: list[Mapping[str, Any]], extra: tuple[Mapping[str, Any], ...]) -> None:
    into.extend(dict(t) for t in extra if dict(t) not in into)


def _queue_labels(state: k.WorkloadState, pod_set: str) -> dict[str, str]:
    """Kueue's podset label, and its queue labels (AssignQueueLabelsForPods, on by default in v0.17;
    the ClusterQueue's only when its name is a DNS-1123 label)."""
    labels = {k.LABEL_POD_SET: pod_set, k.LABEL_LOCAL_QUEUE: state.queue_name}
    cq = state.cluster_queue or ""
    if _DNS_LABEL.match(cq):
        labels[k.LABEL_CLUSTER_QUEUE] = cq
    return labels


def _flavor_parts(assignment: k.PodSetAdmission, flavors: Mapping[str, k.Flavor],
                  node_selector: dict[str, str], origin: dict[str, str],
                  tolerations: list[Mapping[str, Any]]) -> PlacementConflict | MissingFlavor | None:
    for name in assignment.flavor_names:
        flavor = flavors.get(name)
        if flavor is None:
            return MissingFlavor(name)
        conflict = _merge(node_selector, flavor.node_labels, "nodeSelector", f"ResourceFlavor {name!r}", origin)
        if conflict is not None:
            return conflict
        _add_tolerations(tolerations, flavor.tolerations)
    return None


def placement(state: k.WorkloadState, flavors: Mapping[str, k.Flavor], pod_node_selector: Mapping[str, str],
              pod_set: str = k.DEFAULT_POD_SET) -> Placement | PlacementConflict | MissingFlavor:
    """What admitting podSet ``pod_set`` adds to rank pods that already select ``pod_node_selector``
    (the template's nodeSelector over the node pool's, as builders/pods.py writes it)."""
    assignment = state.pod_set(pod_set)
    if assignment is None:
        return PlacementConflict(pod_set, f"the Workload's admission has no podSet {pod_set!r}")
    node_selector = dict(pod_node_selector)
    origin = dict.fromkeys(pod_node_selector, _PODS)
    tolerations: list[Mapping[str, Any]] = []
    problem = _flavor_parts(assignment, flavors, node_selector, origin, tolerations)
    if problem is not None:
        return problem
    labels = _queue_labels(state, pod_set)
    annotations = {k.ANNOTATION_WORKLOAD: state.name} if state.name else {}
    label_origin = dict.fromkeys(labels, "Kueue")
    annotation_origin = dict.fromkeys(annotations, "Kueue")
    for update in (u for u in state.pod_set_updates if u.pod_set == pod_set):
        source = f"admission check {update.check!r}"
        for what, into, extra, seen in (("label", labels, update.labels, label_origin),
                                        ("annotation", annotations, update.annotations, annotation_origin),
                                        ("nodeSelector", node_selector, update.node_selector, origin)):
            conflict = _merge(into, extra, what, source, seen)
            if conflict is not None:
                return conflict
        _add_tolerations(tolerations, update.tolerations)
    added = {key: value for key, value in node_selector.items() if pod_node_selector.get(key) != value}
    return Placement(node_selector=added, tolerations=tuple(tolerations), labels=labels, annotations=annotations,
                     count=assignment.count)


def _waiting(state: k.WorkloadState) -> Wait:
    """Why a Workload is not admitted, in Kueue's words (the QuotaReserved condition's message)."""
    if state.quota_reserved:
        pending = [f"{check.name} ({check.state}{': ' + check.message if check.message else ''})"
                   for check in state.admission_checks if check.state != "Ready"]
        admitted = state.conditions.get(k.ADMITTED)
        detail = "; ".join(pending) or (admitted.message if admitted and admitted.message else "not admitted yet")
        return Wait(CHECKS_PENDING, f"quota reserved in ClusterQueue {state.cluster_queue}, waiting for "
                                    f"admission checks: {detail}")
    reserved = state.conditions.get(k.QUOTA_RESERVED)
    if reserved is not None and reserved.message:
        return Wait(reserved.reason or k.PENDING, reserved.message)
    return Wait(QUEUED, f"waiting for Kueue to reserve quota through LocalQueue {state.queue_name!r}")


def _after_eviction(state: k.WorkloadState, evicted: k.Condition) -> Wait:
    """Evicted, and the quota already given back: the job waits to be admitted again (Kueue requeues at
    once after a preemption, after a backoff after a PodsReady timeout, when a stopped queue restarts,
    when a deactivated Workload is activated again)."""
    requeued = state.requeued
    if requeued is not None and not requeued.status:
        backoff = f" (backoff until {state.requeue_at})" if state.requeue_at else ""
        return Wait(evicted.reason, f"evicted ({evicted.reason}: {evicted.message}), not requeued yet{backoff}")
    reserved = state.conditions.get(k.QUOTA_RESERVED)
    waiting = reserved.message if reserved is not None and reserved.message else "waiting for quota"
    return Wait(evicted.reason, f"evicted ({evicted.reason}: {evicted.message}), requeued: {waiting}")


def admission_decision(state: k.WorkloadState, flavors: Mapping[str, k.Flavor],
                       pod_node_selector: Mapping[str, str]) -> Decision | MissingFlavor:
    """What the gang must do under this Workload (see the module docstring); ``MissingFlavor`` when an
    assigned ResourceFlavor must be read first."""
    finished = state.finished
    if finished is not None:
        return Stop(finished.reason or k.FINISHED, finished.message or "the Workload is finished")
    if state.deleting:
        return Stop(WORKLOAD_DELETED, "Workload is deleted")
    evicted = state.evicted
    if evicted is not None:
        if state.quota_reserved:
            return Stop(evicted.reason, evicted.message, requeue=True)
        return _after_eviction(state, evicted)
    if not state.admitted:
        return _waiting(state)
    where = placement(state, flavors, pod_node_selector)
    if isinstance(where, PlacementConflict):
        return Stop(k.FAILED_TO_START, where.message)
    if isinstance(where, MissingFlavor):
        return where
    return Run(where)
