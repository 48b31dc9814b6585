"""Gang scheduling through Kubernetes' own Workload API (scheduling.k8s.io/v1alpha2).

A data-parallel job is useless until *every* rank runs, so placing some ranks and leaving the
rest Pending only holds accelerators that another job could use, and two such jobs can hold
each other's share forever (anchors section 7, pain point 9). Kubernetes 1.35+ schedules a
PodGroup all-or-nothing (feature gates GenericWorkload and GangScheduling): the scheduler keeps
every pod of the group at its Permit stage until ``minCount`` of them fit, then binds them
together. No Volcano or scheduler-plugins install, no webhook.

What we create per job:

* a ``Workload`` named after the job: the gang's template (``podGroupTemplates[ranks]``), with
  ``controllerRef`` to the DataParallelJob so tools can walk from one to the other;
* a ``PodGroup`` per gang generation (``<job>-gang-<restart>``): PodGroups are immutable and a
  gang restart may change the size, so each generation gets its own, and the old one goes;
* every rank pod carries ``spec.schedulingGroup.podGroupName``.

All three are owned by the job, so deleting it removes everything.
"""

from __future__ import annotations

from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api.labels import generation_labels, job_labels
from dpjob_operator.api.names import pod_group_name, workload_name
from dpjob_operator.api.spec import Job

SCHEDULING_GROUP = "scheduling.k8s.io"
SCHEDULING_VERSION = "v1alpha2"
SCHEDULING_API = f"{SCHEDULING_GROUP}/{SCHEDULING_VERSION}"
TEMPLATE_NAME = "ranks"
# The scheduler's condition on a PodGroup, and its reasons (k8s.io/api/scheduling/v1alpha2).
POD_GROUP_SCHEDULED = "PodGroupScheduled"


def gang_min_count(job: Job) -> int:
    """Ranks that must be placed together: all of them, or the elastic minimum.

    A static DDP job cannot start with fewer than ``replicas`` ranks. An elastic one starts at
    ``minReplicas`` (torchrun re-forms the group when more arrive), so only that many are held
    back; the rest schedule as they fit.
    """
    spec = job.spec
    if spec.rendezvous.mode == "elastic" and spec.rendezvous.min_replicas:
        return min(int(spec.rendezvous.min_replicas), spec.replicas)
    return spec.replicas


def gang_enabled(job: Job, cluster_supports_gangs: bool) -> bool:
    return cluster_supports_gangs and job.spec.run_policy.gang_scheduling != "Disabled"


def _template_spec(job: Job) -> dict[str, Any]:
    """What the Workload's template and every PodGroup copied from it say."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": gang_min_count(job)}}}
    if job.spec.topology_key:
        # One domain for the whole gang, chosen among those where it fits (TopologyAwareWorkloadScheduling).
        spec["schedulingConstraints"] = {"topology": [{"key": job.spec.topology_key}]}
    return spec


def build_workload(job: Job) -> dict[str, Any]:
    """The job's Workload. Its templates are immutable: a different size means a new object."""
    return {
        "apiVersion": SCHEDULING_API,
        "kind": "Workload",
        "metadata": {"name": workload_name(job.name), "namespace": job.namespace, "labels": job_labels(job),
                     "ownerReferences": [job.owner_reference]},
        "spec": {
            "controllerRef": {"apiGroup": c.GROUP, "kind": c.KIND, "name": job.name},
            "podGroupTemplates": [{"name": TEMPLATE_NAME, **_template_spec(job)}],
        },
    }


def build_pod_group(job: Job, restart: int) -> dict[str, Any]:
    """The PodGroup of gang generation ``restart``, copied from the Workload's template."""
    return {
        "apiVersion": SCHEDULING_API,
        "kind": "PodGroup",
        "metadata": {"name": pod_group_name(job.name, restart), "namespace": job.namespace,
                     "labels": generation_labels(job, restart),
                     "ownerReferences": [job.owner_reference]},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": workload_name(job.name),
                                                 "podGroupTemplateName": TEMPLATE_NAME}},
            **_template_spec(job),
        },
    }


def workload_matches(existing: dict[str, Any], job: Job) -> bool:
    """Whether an existing Workload's gang template says what the job now needs (size, topology).

    Workload templates are immutable, so a mismatch means delete and recreate. Fields the server
    adds with defaults are ignored; a field the server dropped (a feature gate off) never matches,
    and that is fine: recreating it cannot bring the field back, so the caller tries once per gang.
    """
    want = _template_spec(job)
    for template in (existing.get("spec") or {}).get("podGroupTemplates") or []:
        if template.get("name") == TEMPLATE_NAME:
            return all(template.get(k) == v for k, v in want.items())
    return False


def pod_group_condition(pod_group: dict[str, Any] | None) -> dict[str, Any] | None:
    """The scheduler's verdict on a PodGroup (``PodGroupScheduled``), if it has given one."""
    for cond in ((pod_group or {}).get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == POD_GROUP_SCHEDULED:
            return cond
    return None
