"""Why a child of a job could not be made: the failures the executor reports as a condition and an
Event (once per change), or retries quietly."""

from __future__ import annotations

from dpjob_operator.controller.reported import ReportedFailure
from dpjob_operator.reconcile.reasons import (
    ADMITTED,
    CONFIGMAP_NAME_CONFLICT,
    CREATED,
    ENVIRONMENT_WRITE_FAILED,
    GANG_NAME_CONFLICT,
    KUEUE_WORKLOAD_NAME_CONFLICT,
    NETWORK_POLICY_NAME_CONFLICT,
    PRIORITY_CLASS_NOT_FOUND,
    RANK_TABLE_READY,
    RANK_TABLE_WRITE_FAILED,
    SERVICE_NAME_CONFLICT,
)

# Which condition says so when a child's name is taken: without its Service, Workload or PodGroup
# no rank pod is created (nor started, without its environment); without its ConfigMap the rank
# table is not ready; without its Kueue Workload the job is never admitted.
_CONFLICT = {"Service": (SERVICE_NAME_CONFLICT, CREATED), "ConfigMap": (CONFIGMAP_NAME_CONFLICT, RANK_TABLE_READY),
             "environment ConfigMap": (CONFIGMAP_NAME_CONFLICT, CREATED),
             "Workload": (GANG_NAME_CONFLICT, CREATED), "PodGroup": (GANG_NAME_CONFLICT, CREATED),
             "NetworkPolicy": (NETWORK_POLICY_NAME_CONFLICT, CREATED),
             "Kueue Workload": (KUEUE_WORKLOAD_NAME_CONFLICT, ADMITTED)}


class ChildConflict(ReportedFailure):
    """A child's name (Service, rank-table ConfigMap, NetworkPolicy, Workload, PodGroup, Kueue Workload) is held
    by an object this job does not control."""

    def __init__(self, kind: str, message: str, report: str | None) -> None:
        reason, condition = _CONFLICT[kind]
        super().__init__(message, report, reason, condition)


class WaitingForPrevious(RuntimeError):
    """A child object of an earlier job of the same name is still there: the garbage collector is
    deleting it. Retried with backoff, not reported: nothing is wrong."""


class RankTableWriteFailed(ReportedFailure):
    """The API server refused a rank-table ConfigMap: the trainer would wait on ``initializing``."""

    def __init__(self, name: str, server_message: str, report: str | None) -> None:
        super().__init__(f"writing rank-table ConfigMap {name} failed: {server_message}", report,
                         RANK_TABLE_WRITE_FAILED, RANK_TABLE_READY)


class EnvironmentWriteFailed(ReportedFailure):
    """The API server refused the ranks' shared environment (a ConfigMap quota, an admission
    webhook): no rank could start (the kubelet waits for an ``envFrom`` map), so Created=False."""

    def __init__(self, name: str, server_message: str, report: str | None) -> None:
        super().__init__(f"writing the ranks' environment ConfigMap {name} failed: {server_message}", report,
                         ENVIRONMENT_WRITE_FAILED, CREATED)


class PriorityClassNotFound(ReportedFailure):
    """The job names a WorkloadPriorityClass (its kueue.x-k8s.io/priority-class label) or a PriorityClass
    (its template's priorityClassName) that does not exist: Kueue would not queue it either. Retried
    with backoff: the job is queued as soon as the class exists."""

    def __init__(self, kind: str, name: str, report: str | None = None) -> None:
        super().__init__(f"{kind} {name!r} not found: the job's Kueue Workload is made once it exists", report,
                         PRIORITY_CLASS_NOT_FOUND, ADMITTED)
