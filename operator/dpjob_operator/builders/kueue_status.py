"""What the job framework writes to a Workload it owns, as Kueue v0.17's ``jobframework`` writes it (pure).

Each function takes the Workload as last read and returns the body of a JSON merge patch (RFC 7386),
or None when there is nothing to write. A status patch goes to the ``status`` subresource; it carries
the whole ``status.conditions`` list (a merge patch replaces a list whole) and the read
``metadata.resourceVersion`` as a precondition, so a write against a Workload Kueue changed in
between answers 409 and the pass decides again (Kueue's own merge-patch path,
WorkloadRequestUseMergePatch, is the same idea: ``clientutil.PatchStatus`` with a strict diff).

* ``requeue_patch``: after an eviction, once the gang is stopped: the ``Requeued`` condition (True
  only after a preemption or node failures: other evictions wait for Kueue to requeue them),
  ``QuotaReserved=False`` (Pending, with the eviction's message), ``status.admission`` cleared and
  ``Admitted`` brought in line (``workload.SetRequeuedCondition``, ``UnsetQuotaReservationWithCondition``,
  ``SyncAdmittedCondition``);
* ``finish_patch``: ``Finished=True`` with Succeeded, Failed or FailedToStart (``workload.Finish``);
* ``pods_ready_patch``: the ``PodsReady`` condition Kueue's waitForPodsReady times (``generatePodsReadyCondition``);
* ``activation_patch``: ``spec.active`` false while the job is suspended (Kueue then evicts it and the
  quota goes back: a suspended job holds none), true again on resume; the annotation
  ``dpjob.io/deactivated-for-suspend`` says the operator deactivated it, so a Workload Kueue itself
  deactivated (its maximum execution time, its requeuing limit) is never activated again by a resume;
* ``finalizer_patch``: drop ``kueue.x-k8s.io/resource-in-use`` (``workload.RemoveFinalizer``), once the
  job is finished or deleted and its pods are gone: until then the quota stays held.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dpjob_operator.api import kueue as k
from dpjob_operator.api.timestamps import iso, parse_iso

MAX_CONDITION_MESSAGE_BYTES = 32 * 1024   # api.TruncateConditionMessage
_NOT_READY = "Not all pods are ready or succeeded"
_WAITING_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"
_READY = "All pods reached readiness and the workload is running"


def truncate_message(message: str) -> str:
    """A condition message cut to Kueue's limit, ending in `` ...`` when cut."""
    raw = message.encode()
    if len(raw) <= MAX_CONDITION_MESSAGE_BYTES:
        return message
    return raw[:MAX_CONDITION_MESSAGE_BYTES - 4].decode(errors="ignore") + " ..."


def set_condition(conditions: list[dict[str, Any]], ctype: str, status: bool, reason: str, message: str,
                  generation: int, now: datetime) -> bool:
    """apimeta.SetStatusCondition: add, or update in place; the transition time moves only when the
    status does. Returns whether anything changed."""
    new = {"type": ctype, "status": "True" if status else "False", "reason": reason,
           "message": truncate_message(message), "observedGeneration": generation}
    existing = next((cond for cond in conditions if cond.get("type") == ctype), None)
    if existing is None:
        conditions.append({**new, "lastTransitionTime": iso(now)})
        return True
    changed = False
    if existing.get("status") != new["status"]:
        existing["lastTransitionTime"] = iso(now)
        changed = True
    for key in ("status", "reason", "message", "observedGeneration"):
        if existing.get(key) != new[key]:
            existing[key] = new[key]
            changed = True
    return changed


def _find(conditions: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((cond for cond in conditions if cond.get("type") == ctype), None)


def _is_true(conditions: list[dict[str, Any]], ctype: str) -> bool:
    cond = _find(conditions, ctype)
    return cond is not None and cond.get("status") == "True"


def _read(workload: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    """(a copy of the conditions, the generation, the patch's metadata precondition)."""
    meta = workload.get("metadata") or {}
    status = workload.get("status") or {}
    conditions = [dict(cond) for cond in copy.deepcopy(status.get("conditions") or []) if isinstance(cond, Mapping)]
    return conditions, int(meta.get("generation") or 0), {"resourceVersion": meta.get("resourceVersion")}


def _sync_admitted(workload: Mapping[str, Any], conditions: list[dict[str, Any]], generation: int,
                   now: datetime, status_patch: dict[str, Any]) -> None:
    """SyncAdmittedCondition once the quota is released: Admitted turns False, and the admitted time
    is added to ``accumulatedPastExecutionTimeSeconds``."""
    admitted = _find(conditions, k.ADMITTED)
    if admitted is None or admitted.get("status") != "True":
        return
    checks = (workload.get("status") or {}).get("admissionChecks") or []
    all_ready = all(check.get("state") == "Ready" for check in checks if isinstance(check, Mapping))
    since = parse_iso(admitted.get("lastTransitionTime"))
    if since is not None:
        past = (workload.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0
        status_patch["accumulatedPastExecutionTimeSeconds"] = int(past) + int((now - since).total_seconds())
    if all_ready:
        set_condition(conditions, k.ADMITTED, False, "NoReservation", "The workload has no reservation",
                      generation, now)
    else:
        set_condition(conditions, k.ADMITTED, False, "NoReservationUnsatisfiedChecks",
                      "The workload has no reservation and not all checks ready", generation, now)


def requeue_patch(workload: Mapping[str, Any], now: datetime) -> dict[str, Any] | None:
    """Give an evicted Workload's quota back once its gang is stopped (jobframework's step 6). None
    unless it is evicted and still holds quota."""
    conditions, generation, meta = _read(workload)
    evicted = _find(conditions, k.EVICTED)
    if evicted is None or evicted.get("status") != "True" or not _is_true(conditions, k.QUOTA_RESERVED):
        return None
    reason, message = str(evicted.get("reason") or ""), str(evicted.get("message") or "")
    set_condition(conditions, k.REQUEUED, reason in k.REQUEUED_EVICTIONS, reason, message, generation, now)
    set_condition(conditions, k.QUOTA_RESERVED, False, k.PENDING, message, generation, now)
    status: dict[str, Any] = {"admission": None}
    _sync_admitted(workload, conditions, generation, now, status)
    status["conditions"] = conditions
    return {"metadata": meta, "status": status}


def finish_patch(workload: Mapping[str, Any], reason: str, message: str, now: datetime) -> dict[str, Any] | None:
    """Declare the Workload finished (``reason``: Succeeded, Failed, FailedToStart); None when it is already."""
    conditions, generation, meta = _read(workload)
    if _is_true(conditions, k.FINISHED):
        return None
    set_condition(conditions, k.FINISHED, True, reason, message, generation, now)
    return {"metadata": meta, "status": {"conditions": conditions}}


def _pods_ready_condition(conditions: list[dict[str, Any]], admitted: bool, pods_ready: bool) -> tuple[bool, str, str]:
    current = _find(conditions, k.PODS_READY)
    if not admitted:
        return False, "WaitForStart", _NOT_READY
    if pods_ready:
        recovering = current is not None and current.get("reason") in ("WaitForRecovery", "Recovered")
        return True, "Recovered" if recovering else "Started", _READY
    if current is not None and (current.get("status") == "True" or current.get("reason") == "WaitForRecovery"):
        return False, "WaitForRecovery", _WAITING_FOR_RECOVERY
    return False, "WaitForStart", _NOT_READY


def pods_ready_patch(workload: Mapping[str, Any], pods_ready: bool, now: datetime) -> dict[str, Any] | None:
    """The PodsReady condition for ``pods_ready`` (every rank Ready); None when the condition already has
    that status and reason. Kueue's waitForPodsReady evicts an admitted Workload whose PodsReady stays
    False past its timeout (PodsReadyTimeout)."""
    conditions, generation, meta = _read(workload)
    status, reason, message = _pods_ready_condition(conditions, _is_true(conditions, k.ADMITTED), pods_ready)
    current = _find(conditions, k.PODS_READY)
    if current is not None and current.get("reason") == reason and (current.get("status") == "True") == status:
        return None
    set_condition(conditions, k.PODS_READY, status, reason, message, generation, now)
    return {"metadata": meta, "status": {"conditions": conditions}}


def finalizer_patch(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch of the Workload (not its status) that drops Kueue's finalizer; None without it."""
    meta = workload.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or [])
    if k.FINALIZER not in finalizers:
        return None
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                         "finalizers": [name for name in finalizers if name != k.FINALIZER]}}


ANNOTATION_DEACTIVATED = "dpjob.io/deactivated-for-suspend"


def activation_patch(workload: Mapping[str, Any], suspended: bool) -> dict[str, Any] | None:
    """A merge patch of the Workload (not its status) that deactivates it for a suspended job, or
    activates it again once the job is resumed, if the operator deactivated it; None: nothing to do."""
    meta = workload.get("metadata") or {}
    active = (workload.get("spec") or {}).get("active") is not False
    ours = ANNOTATION_DEACTIVATED in (meta.get("annotations") or {})
    if suspended == (not active) or (not suspended and not ours):
        return None
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                         "annotations": {ANNOTATION_DEACTIVATED: "true" if suspended else None}},
            "spec": {"active": not suspended}}
