"""The Kueue Workload of a DataParallelJob: what Kueue's job framework would create for it (pure).

Kueue v0.17 builds no controller for an external framework, so the operator creates the Workload
itself, as ``jobframework.ConstructWorkload`` + ``prepareWorkload`` do for a built-in job:

* the name Kueue would give it (``api/kueue.workload_name``), in the job's namespace, owned by the
  job (a controller reference: Kueue finds a Workload's job through it), labelled with the job's uid
  (Kueue's label) and the job's own labels (the operator watches its Workloads by them),
  with Kueue's ``resource-in-use`` finalizer (the quota stays held until the operator drops it, once
  the job's pods are gone) and the job's ``provreq.kueue.x-k8s.io/`` annotations;
* ``spec.queueName`` from the job's ``kueue.x-k8s.io/queue-name`` label, ``spec.priority`` and
  ``spec.priorityClassRef`` as resolved by the caller (``api/kueue.Priority``: it reads the classes),
  ``spec.maximumExecutionTimeSeconds`` from the job's ``kueue.x-k8s.io/max-exec-time-seconds`` label;
* one podSet, ``main`` (Kueue's name for a job with one kind of pod: batch/Job, Pod, StatefulSet,
  and the CRD's default), ``count`` = replicas, and as template the rank pods' own spec, built by
  ``builders/pods.py``, so Kueue admits the requests and placement the pods really carry.

The template is the rank pods' spec cut to what admission reads (requests, placement, priority,
runtime class): a Workload's podSets are immutable while it holds quota, so nothing that varies by
rank (hostname, env) or by gang generation (its PodGroup, avoided nodes, the same-domain pod
affinity) goes in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api import kueue as k
from dpjob_operator.api.labels import job_labels
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.pods import build_rank_pod

#: The pod spec fields Kueue's admission reads (requests, overhead, placement, priority).
TEMPLATE_SPEC_KEYS = ("initContainers", "containers", "nodeSelector", "affinity", "tolerations",
                      "priorityClassName", "runtimeClassName", "overhead", "resourceClaims")
TEMPLATE_CONTAINER_KEYS = ("name", "image", "resources", "ports", "restartPolicy")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INT32_MAX = 2**31 - 1


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    return {key: container[key] for key in TEMPLATE_CONTAINER_KEYS if key in container}


def pod_set_template(job: Job, pool: PoolConfig) -> dict[str, Any]:
    """The podSet's template: rank 0 of the first generation as the operator builds it, cut to what
    admission reads; metadata is labels and annotations only (all Kueue allows)."""
    # The same-domain pod affinity names one gang generation's pods: admission does not read it.
    without_generation_affinity = replace(job, spec=replace(job.spec, topology_key=None))
    pod = build_rank_pod(without_generation_affinity, 0, 0, pool)
    spec = pod["spec"]
    template_spec = {key: spec[key] for key in TEMPLATE_SPEC_KEYS if key in spec}
    for key in ("initContainers", "containers"):
        if key in template_spec:
            template_spec[key] = [_container(ctr) for ctr in template_spec[key]]
    labels = {key: value for key, value in pod["metadata"]["labels"].items()
              if key not in (c.LABEL_RANK, c.LABEL_RESTART)}
    return {"metadata": {"labels": labels, "annotations": dict(pod["metadata"]["annotations"])},
            "spec": template_spec}


def _max_exec_time_seconds(labels: Mapping[str, str]) -> int | None:
    """Kueue's MaximumExecutionTimeSecondsForObject: a positive int32, anything else is ignored."""
    try:
        value = int(labels.get(k.LABEL_MAX_EXEC_TIME_SECONDS, ""))
    except ValueError:
        return None
    return value if 0 < value <= _INT32_MAX else None


def _metadata(job: Job, short_names: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": k.workload_name(job.name, job.uid, short_names), "namespace": job.namespace}
    # The job's labels too: the operator's Workload watch selects them (controller/kueue_watch.py).
    meta["labels"] = job_labels(job)
    if len(job.uid) <= 63 and _LABEL_VALUE.match(job.uid):  # Kueue leaves the label off otherwise
        meta["labels"][k.LABEL_JOB_UID] = job.uid
    provreq = {key: value for key, value in sorted(job.annotations.items())
               if key.startswith(k.PROVREQ_ANNOTATION_PREFIX)}
    if provreq:
        meta["annotations"] = provreq
    meta["finalizers"] = [k.FINALIZER]
    meta["ownerReferences"] = [job.owner_reference]
    return meta


def build_workload(job: Job, pool: PoolConfig, priority: k.Priority | None = None,
                   short_names: bool = False) -> dict[str, Any]:
    """The Workload for ``job`` (queued in its ``kueue.x-k8s.io/queue-name``). ``priority``: what
    the caller read for the job's class (None: no class, priority 0). ``short_names``: Kueue runs
    with ShortWorkloadNames. Deterministic: the same job gives the same object."""
    priority = priority or k.Priority()
    spec: dict[str, Any] = {}
    queue = k.queue_name(job.labels)
    if queue:
        spec["queueName"] = queue
    spec["podSets"] = [{"name": k.DEFAULT_POD_SET, "count": job.spec.replicas,
                        "template": pod_set_template(job, pool)}]
    ref = priority.ref()
    if ref is not None:
        spec["priorityClassRef"] = ref
    spec["priority"] = priority.value
    max_seconds = _max_exec_time_seconds(job.labels)
    if max_seconds is not None:
        spec["maximumExecutionTimeSeconds"] = max_seconds
    return {"apiVersion": k.API_VERSION, "kind": k.WORKLOAD_KIND, "metadata": _metadata(job, short_names),
            "spec": spec}


def priority_class_to_read(job: Job) -> tuple[str, str | None]:
    """Which class gives the job's priority, as Kueue's ExtractPriority looks: (WorkloadPriorityClass,
    the job's ``kueue.x-k8s.io/priority-class`` label), else (PriorityClass, the template's
    ``priorityClassName``), else (PriorityClass, None): the cluster's globalDefault class, if any."""
    label = job.labels.get(k.LABEL_PRIORITY_CLASS)
    if label:
        return k.WORKLOAD_PRIORITY_CLASS_KIND, label
    pod_class = (job.spec.template.get("spec") or {}).get("priorityClassName")
    return k.POD_PRIORITY_CLASS_KIND, pod_class or None


def default_priority(priority_classes: Sequence[Mapping[str, Any]]) -> k.Priority:
    """The priority of a job that names no class: the globalDefault PriorityClass (of several, the
    lowest value, as Kueue picks), else 0 and no class."""
    defaults = [pc for pc in priority_classes if pc.get("globalDefault")]
    if not defaults:
        return k.Priority()
    chosen = min(defaults, key=lambda pc: int(pc.get("value") or 0))
    return k.Priority(value=int(chosen.get("value") or 0), class_kind=k.POD_PRIORITY_CLASS_KIND,
                      class_name=str((chosen.get("metadata") or {}).get("name") or ""))


def _requests_by_container(pod_set: Mapping[str, Any]) -> list[tuple[str, Any]]:
    spec = (pod_set.get("template") or {}).get("spec") or {}
    return [(str(ctr.get("name")), ctr.get("resources") or {})
            for key in ("initContainers", "containers") for ctr in spec.get(key) or []]


def workload_matches(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether an existing Workload still describes the job (Kueue's EquivalentToWorkload, cut to what
    changes admission): the same podSets, counts and per-container resources. A mismatch means the
    job changed (a resize): the Workload is replaced, never edited, since its podSets are immutable
    while it holds quota."""
    have = (existing.get("spec") or {}).get("podSets") or []
    want = (desired.get("spec") or {}).get("podSets") or []
    if len(have) != len(want):
        return False
    for got, expected in zip(have, want, strict=True):
        if (got.get("name") or k.DEFAULT_POD_SET) != expected.get("name") or got.get("count") != expected.get("count"):
            return False
        if _requests_by_container(got) != _requests_by_container(expected):
            return False
    return True
