"""Kueue's vocabulary for a DataParallelJob, as Kueue v0.17 writes it, and a typed view of a Workload.

Kueue v0.17 serves ``kueue.x-k8s.io/v1beta2`` (the storage version; v1beta1 is still served but
deprecated). For a framework listed in its ``integrations.externalFrameworks`` Kueue builds no
controller: the framework's own operator creates the Workload, starts the job once Kueue admits
it, stops it on eviction and marks the Workload finished. The names here are those of Kueue's
``apis/kueue/v1beta2`` and ``pkg/controller/constants``; the name of a job's Workload is
``GetWorkloadNameForOwnerWithGVK`` (``pkg/controller/jobframework/workload_names.go``), so a
``kubectl get workloads`` shows what Kueue's own integrations would have made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpjob_operator.api import constants as c

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
WORKLOAD_KIND, WORKLOAD_PLURAL = "Workload", "workloads"
RESOURCE_FLAVOR_PLURAL = "resourceflavors"
WORKLOAD_PRIORITY_CLASS_KIND, WORKLOAD_PRIORITY_CLASS_PLURAL = "WorkloadPriorityClass", "workloadpriorityclasses"
POD_PRIORITY_CLASS_GROUP, POD_PRIORITY_CLASS_KIND = "scheduling.k8s.io", "PriorityClass"
#: The entry for Kueue's ``integrations.externalFrameworks`` (``Kind.version.group``).
EXTERNAL_FRAMEWORK = f"{c.KIND}.{c.VERSION}.{c.GROUP}"

# Labels and annotations (pkg/controller/constants, pkg/constants).
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"              # on the job: its LocalQueue
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"      # on the job: a WorkloadPriorityClass
LABEL_MAX_EXEC_TIME_SECONDS = "kueue.x-k8s.io/max-exec-time-seconds"  # on the job
LABEL_JOB_UID = "kueue.x-k8s.io/job-uid"                    # on the Workload: its job's uid
LABEL_POD_SET = "kueue.x-k8s.io/podset"                     # on the pods of an admitted podSet
LABEL_LOCAL_QUEUE = "kueue.x-k8s.io/local-queue-name"       # on the pods (AssignQueueLabelsForPods)
LABEL_CLUSTER_QUEUE = "kueue.x-k8s.io/cluster-queue-name"   # on the pods (AssignQueueLabelsForPods)
ANNOTATION_WORKLOAD = "kueue.x-k8s.io/workload"             # on the pods (TopologyAwareScheduling)
PROVREQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"       # job annotations copied to the Workload
FINALIZER = "kueue.x-k8s.io/resource-in-use"                # holds the quota until the pods are gone
DEFAULT_POD_SET = "main"                                    # kueue.DefaultPodSetName

# Condition types of a Workload.
QUOTA_RESERVED, ADMITTED, EVICTED, FINISHED = "QuotaReserved", "Admitted", "Evicted", "Finished"
PODS_READY, REQUEUED, PREEMPTED = "PodsReady", "Requeued", "Preempted"

# Reasons of the Evicted condition (a deactivation's reason may carry a cause: DeactivatedDueTo<cause>).
EVICTED_BY_PREEMPTION = "Preempted"
EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"
EVICTED_BY_CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
EVICTED_BY_LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
EVICTED_BY_NODE_FAILURES = "NodeFailures"
EVICTED_BY_DEACTIVATION = "Deactivated"
#: The Requeued reason of a deactivated Workload made active again (its Evicted condition stays True,
#: reason Deactivated, until Kueue reserves quota for it again).
REQUEUED_BY_REACTIVATION = "Reactivated"
#: Evictions after which the job framework marks the Workload Requeued=True (reconciler.go, step 6).
REQUEUED_EVICTIONS = frozenset({EVICTED_BY_PREEMPTION, EVICTED_BY_NODE_FAILURES})

# Reasons of QuotaReserved=False: the scheduler's (Pending, Waiting) and the workload controller's.
PENDING, INADMISSIBLE = "Pending", "Inadmissible"
# Reasons of Finished=True.
FINISHED_SUCCEEDED, FINISHED_FAILED, FAILED_TO_START = "Succeeded", "Failed", "FailedToStart"

_HASH_LENGTH = 5
LONG_NAME_LIMIT = 253   # a Workload name, by default
SHORT_NAME_LIMIT = 63   # with Kueue's ShortWorkloadNames feature gate (alpha in v0.17, off by default)


def owner_workload_name(owner_name: str, owner_uid: str, kind: str, group: str, limit: int) -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK for any owner: ``<kind lowercased>-<name>`` cut to
    ``limit`` less 6, then ``-`` and the first 5 hex digits of sha1("<Kind>\\n<group>\\n<name>\\n<uid>")
    (the API version takes no part: the name survives a version bump of the job's API)."""
    prefix = f"{kind.lower()}-{owner_name}"[:limit - 1 - _HASH_LENGTH]
    digest = hashlib.sha1("\n".join((kind, group, owner_name, owner_uid)).encode(), usedforsecurity=False)
    return f"{prefix}-{digest.hexdigest()[:_HASH_LENGTH]}"


def workload_name(job_name: str, job_uid: str, short_names: bool = False) -> str:
    """The name Kueue gives the Workload of DataParallelJob ``job_name``: at most 253 characters, or
    63 when Kueue runs with its ShortWorkloadNames gate (``short_names``)."""
    limit = SHORT_NAME_LIMIT if short_names else LONG_NAME_LIMIT
    return owner_workload_name(job_name, job_uid, c.KIND, c.GROUP, limit)


def queue_name(job_labels: Mapping[str, str]) -> str | None:
    """The LocalQueue a job asks for (its ``kueue.x-k8s.io/queue-name`` label); None: not Kueue's."""
    return job_labels.get(LABEL_QUEUE_NAME) or None


@dataclass(frozen=True)
class Priority:
    """A Workload's ``spec.priorityClassRef`` (None: no class) and ``spec.priority``."""

    value: int = 0
    class_kind: str | None = None   # WorkloadPriorityClass | PriorityClass
    class_name: str | None = None

    def ref(self) -> dict[str, str] | None:
        if self.class_kind is None or self.class_name is None:
            return None
        group = GROUP if self.class_kind == WORKLOAD_PRIORITY_CLASS_KIND else POD_PRIORITY_CLASS_GROUP
        return {"group": group, "kind": self.class_kind, "name": self.class_name}


@dataclass(frozen=True)
class Flavor:
    """What an assigned ResourceFlavor adds to the pods: node labels to select and tolerations."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def parse_flavor(obj: Mapping[str, Any]) -> Flavor:
    spec = obj.get("spec") or {}
    return Flavor(node_labels=dict(spec.get("nodeLabels") or {}),
                  tolerations=tuple(dict(t) for t in spec.get("tolerations") or [] if isinstance(t, Mapping)))


@dataclass(frozen=True)
class Placement:
    """What the rank pods get once admitted (reconcile/kueue_admission.py): nodeSelector entries and
    tolerations ANDed into theirs, labels and annotations added; ``count`` the pods admitted (replicas:
    the podSet has no minCount). builders/pods.py writes it into every rank pod."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    count: int | None = None


# ---- a Workload's state, as the job framework reads it ---------------------------------------


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


@dataclass(frozen=True)
class PodSetAdmission:
    """One entry of ``status.admission.podSetAssignments``."""

    name: str
    flavors: Mapping[str, str] = field(default_factory=dict)   # resource -> ResourceFlavor
    count: int | None = None          # None: a Workload admitted before the field existed
    resource_usage: Mapping[str, str] = field(default_factory=dict)
    topology_assigned: bool = False   # Topology-Aware Scheduling chose domains per pod

    @property
    def flavor_names(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.flavors.values())))


@dataclass(frozen=True)
class PodSetUpdate:
    """What an admission check asks to add to a podSet's pods (``status.admissionChecks[].podSetUpdates``)."""

    check: str
    pod_set: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class AdmissionCheck:
    name: str
    state: str       # Pending | Ready | Retry | Rejected
    message: str = ""


@dataclass(frozen=True)
class WorkloadState:
    """What the operator needs of a Workload; every field tolerates its absence on the wire."""

    name: str = ""
    queue_name: str = ""
    deleting: bool = False
    active: bool = True
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    cluster_queue: str | None = None
    pod_sets: tuple[PodSetAdmission, ...] = ()
    admission_checks: tuple[AdmissionCheck, ...] = ()
    pod_set_updates: tuple[PodSetUpdate, ...] = ()
    requeue_count: int | None = None
    requeue_at: str | None = None

    def is_true(self, condition_type: str) -> bool:
        cond = self.conditions.get(condition_type)
        return cond is not None and cond.status

    @property
    def quota_reserved(self) -> bool:
        return self.is_true(QUOTA_RESERVED)

    @property
    def admitted(self) -> bool:
        return self.is_true(ADMITTED)

    @property
    def finished(self) -> Condition | None:
        return self.conditions[FINISHED] if self.is_true(FINISHED) else None

    @property
    def evicted(self) -> Condition | None:
        """The Evicted condition while it holds: its reason (Preempted, PodsReadyTimeout, ...) and message."""
        return self.conditions[EVICTED] if self.is_true(EVICTED) else None

    @property
    def requeued(self) -> Condition | None:
        return self.conditions.get(REQUEUED)

    def pod_set(self, name: str) -> PodSetAdmission | None:
        return next((ps for ps in self.pod_sets if ps.name == name), None)


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _conditions(status: Mapping[str, Any]) -> dict[str, Condition]:
    out: dict[str, Condition] = {}
    for cond in _dicts(status.get("conditions")):
        if cond.get("type"):
            out[str(cond["type"])] = Condition(
                type=str(cond["type"]), status=cond.get("status") == "True", reason=str(cond.get("reason") or ""),
                message=str(cond.get("message") or ""), last_transition_time=cond.get("lastTransitionTime"))
    return out


def _pod_set_admission(psa: Mapping[str, Any]) -> PodSetAdmission:
    count = psa.get("count")
    return PodSetAdmission(name=str(psa.get("name") or DEFAULT_POD_SET), flavors=_str_map(psa.get("flavors")),
                           count=int(count) if isinstance(count, int) else None,
                           resource_usage=_str_map(psa.get("resourceUsage")),
                           topology_assigned=bool(psa.get("topologyAssignment")))


def _check_updates(check: Mapping[str, Any]) -> list[PodSetUpdate]:
    return [PodSetUpdate(check=str(check.get("name") or ""), pod_set=str(update.get("name") or ""),
                         labels=_str_map(update.get("labels")), annotations=_str_map(update.get("annotations")),
                         node_selector=_str_map(update.get("nodeSelector")),
                         tolerations=tuple(dict(t) for t in _dicts(update.get("tolerations"))))
            for update in _dicts(check.get("podSetUpdates"))]


def parse_workload(obj: Mapping[str, Any]) -> WorkloadState:
    """A Workload as served (any missing part reads as absent: a Workload Kueue has not looked at yet)."""
    meta, spec, status = (obj.get(key) or {} for key in ("metadata", "spec", "status"))
    admission = status.get("admission") or {}
    checks: Sequence[Mapping[str, Any]] = _dicts(status.get("admissionChecks"))
    requeue = status.get("requeueState") or {}
    return WorkloadState(
        name=str(meta.get("name") or ""), queue_name=str(spec.get("queueName") or ""),
        deleting=bool(meta.get("deletionTimestamp")), active=spec.get("active") is not False,
        conditions=_conditions(status), cluster_queue=admission.get("clusterQueue") or None,
        pod_sets=tuple(_pod_set_admission(psa) for psa in _dicts(admission.get("podSetAssignments"))),
        admission_checks=tuple(AdmissionCheck(name=str(ch.get("name") or ""), state=str(ch.get("state") or ""),
                                              message=str(ch.get("message") or "")) for ch in checks),
        pod_set_updates=tuple(update for ch in checks for update in _check_updates(ch)),
        requeue_count=requeue.get("count") if isinstance(requeue.get("count"), int) else None,
        requeue_at=requeue.get("requeueAt") or None)
