"""The operator as Kueue's job framework for DataParallelJob: the I/O half (docs/kueue.md).

Kueue v0.17 builds no controller for an external framework, so the operator does what Kueue's
``jobframework`` reconciler does for its built-in kinds. This module reads and writes; what to write
is decided by the planner (reconcile/kueue_gate.py, reconcile/kueue_sync.py):

* ``detect``: on when the operator's config allows it (``kueue: auto``) and the API server serves
  ``kueue.x-k8s.io/v1beta2`` workloads; an operator whose RBAC may not list them says so once in its
  log and runs every job without Kueue, as one may not make NetworkPolicies runs without isolation;
* ``observe``: the job's Workload from the watch (controller/kueue_watch.py) and the ResourceFlavors
  its admission names (read once, then remembered: they change rarely);
* ``ensure``: create the Workload, with the priority of the job's class (read only then), claimed by
  controller UID like every child: a Workload of its name that the job does not control is never
  adopted (``ChildConflict``: condition Admitted=False/KueueWorkloadNameConflict and one Warning);
* ``patch``/``delete``: the planner's writes; a 409 (Kueue wrote in between) waits for the pass the
  watch queues with the newer Workload;
* ``release_orphans``: drop the finalizer of a deleted job's Workload once its pods are gone.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dpjob_operator.api import kueue as k
from dpjob_operator.api.observed import KueueObservation, PodObservation
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.kueue_workload import build_workload, default_priority, priority_class_to_read
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.child_failures import PriorityClassNotFound
from dpjob_operator.controller.children import Claim, create_or_claim
from dpjob_operator.controller.kueue_watch import SELECTOR, WORKLOADS, KueueWatch
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.listing import may_list
from dpjob_operator.reconcile.actions import DeleteKueueWorkload, PatchKueueWorkload
from dpjob_operator.reconcile.claims import OURS, ownership
from dpjob_operator.reconcile.kueue_sync import orphan_finalizer_patch

log = logging.getLogger("dpjob.controller")
KIND = "Kueue Workload"  # how a name conflict names it (controller/child_failures.py)
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
MADE_SECONDS = 10.0  # a Workload just created is taken as there until the watch shows it


class KueueWorkloads:
    def __init__(self, cfg: OperatorConfig, kube: KubeClient, blocking: Blocking, watch: KueueWatch | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.blocking, self._clock = kube, blocking, clock
        self.mode, self.short_names, self.namespaces = cfg.kueue, cfg.kueue_short_workload_names, cfg.namespaces
        self.memo_seconds = 10 * cfg.resync_seconds  # a ResourceFlavor or the default priority, re-read after
        self.watch = watch          # the Workload watch, if the caller wants one
        self._watch: KueueWatch | None = None  # the same, once started (the integration is on)
        self._flavors: dict[str, tuple[k.Flavor, float]] = {}
        self._default: tuple[k.Priority, float] | None = None
        self._made: dict[str, tuple[str, float]] = {}  # job uid -> (the Workload it created, when)

    @property
    def enabled(self) -> bool:
        return self._watch is not None

    async def detect(self) -> bool:
        """Turn the integration on if the config allows it, the server serves Workloads and we may list them."""
        if self.mode != "auto" or self.watch is None:
            log.info("Kueue integration: off (%s)", "disabled in the operator's config" if self.mode != "auto"
                     else "no Workload watch")
            return False
        if not await self.blocking.run(self.kube.serves, k.GROUP, k.VERSION, k.WORKLOAD_PLURAL):
            log.info("Kueue integration: off (the API server does not serve %s workloads)", k.API_VERSION)
            return False
        for namespace in self.namespaces or (None,):
            if not await self.blocking.run(may_list, self.kube, WORKLOADS, SELECTOR, namespace):
                log.error("Kueue integration: off: may not list %s workloads (RBAC); jobs with a %s label run "
                          "without Kueue. Grant the chart's Kueue rules, or set kueue.integration=disabled",
                          k.API_VERSION, k.LABEL_QUEUE_NAME)
                return False
        self.watch.start()
        self._watch = self.watch
        log.info("Kueue integration: on (%s workloads; external framework %s)", k.API_VERSION, k.EXTERNAL_FRAMEWORK)
        return True

    def wait_synced(self, timeout: float) -> bool:
        return self._watch is None or self._watch.wait_synced(timeout)

    def stuck(self) -> str | None:
        return self._watch.stuck() if self._watch is not None else None

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def workload_name(self, job: Job) -> str:
        return k.workload_name(job.name, job.uid, self.short_names)

    def _ours(self, job: Job) -> dict[str, Any] | None:
        """The job's Workload as last watched, if the job controls it."""
        if self._watch is None:
            return None
        body = self._watch.get(job.namespace, self.workload_name(job))
        if body is None or ownership(body.get("metadata") or {}, job.uid, job.name) != OURS:
            return None
        return body

    async def observe(self, job: Job) -> KueueObservation | None:
        """The job's Workload and its admission's ResourceFlavors; None: Kueue does not queue this job."""
        if self._watch is None:
            return None
        body = self._ours(job)
        if body is None and k.queue_name(job.labels) is None:
            return None
        state = k.parse_workload(body) if body is not None else None
        flavors = await self._read_flavors(state) if state is not None and state.admitted else {}
        return KueueObservation(self.workload_name(job), body, state, flavors)

    async def _read_flavors(self, state: k.WorkloadState) -> dict[str, k.Flavor]:
        """The admitted ResourceFlavors; one not found is left out (the planner waits for it)."""
        out: dict[str, k.Flavor] = {}
        for name in sorted({flavor for ps in state.pod_sets for flavor in ps.flavor_names}):
            known = self._flavors.get(name)
            if known is None or self._clock() - known[1] > self.memo_seconds:
                obj = await self.blocking.run(self.kube.get_cluster_object, k.GROUP, k.VERSION,
                                              k.RESOURCE_FLAVOR_PLURAL, name)
                known = None if obj is None else (k.parse_flavor(obj), self._clock())
            if known is not None:
                self._flavors[name] = known
                out[name] = known[0]
        return out

    async def ensure(self, job: Job, pool: PoolConfig, claim: Claim) -> None:
        """Create the job's Workload unless the watch (or a creation just made) shows it."""
        name = self.workload_name(job)
        made = self._made.get(job.uid)
        if self._ours(job) is not None or (made is not None and made[0] == name
                                           and self._clock() - made[1] <= MADE_SECONDS):
            return
        workload = build_workload(job, pool, await self._priority(job), self.short_names)
        create = functools.partial(self.blocking.run, self.kube.create_object, k.GROUP, k.VERSION,
                                   k.WORKLOAD_PLURAL, workload)
        read = functools.partial(self.blocking.run, self.kube.get_object, k.GROUP, k.VERSION, k.WORKLOAD_PLURAL,
                                 job.namespace, name)
        await create_or_claim(KIND, name, create, read, claim)
        self._made[job.uid] = (name, self._clock())

    async def _priority(self, job: Job) -> k.Priority:
        """The job's priority as Kueue's ExtractPriority finds it (builders/kueue_workload.py)."""
        kind, name = priority_class_to_read(job)
        if name is None:
            if self._default is None or self._clock() - self._default[1] > self.memo_seconds:
                classes = await self.blocking.run(self.kube.list_cluster_objects, *PRIORITY_CLASSES)
                self._default = (default_priority(classes), self._clock())
            return self._default[0]
        where = ((k.GROUP, k.VERSION, k.WORKLOAD_PRIORITY_CLASS_PLURAL) if kind == k.WORKLOAD_PRIORITY_CLASS_KIND
                 else PRIORITY_CLASSES)
        obj = await self.blocking.run(self.kube.get_cluster_object, *where, name)
        if obj is None:
            raise PriorityClassNotFound(kind, name)
        return k.Priority(int(obj.get("value") or 0), kind, name)

    async def patch(self, job: Job, action: PatchKueueWorkload) -> None:
        await self._patch(job.namespace, action.name, action.patch, action.status, action.why)

    async def _patch(self, namespace: str, name: str, patch: Mapping[str, Any], status: bool, why: str) -> None:
        try:
            await self.blocking.run(self.kube.patch_object, k.GROUP, k.VERSION, k.WORKLOAD_PLURAL, namespace, name,
                                    patch, status)
        except errors.ApiError as e:
            if errors.status_of(e) not in (404, 409):
                raise
            # Gone, or changed since it was read: the watch brings the change and a pass decides again.
            log.debug("Workload %s/%s not patched (%s): %s", namespace, name, why, errors.describe(e))

    async def delete(self, job: Job, action: DeleteKueueWorkload) -> None:
        log.info("deleting Workload %s/%s: %s", job.namespace, action.name, action.why)
        await self.blocking.run(self.kube.delete_object, k.GROUP, k.VERSION, k.WORKLOAD_PLURAL, job.namespace,
                                action.name)
        self._made.pop(job.uid, None)

    async def release_orphans(self, namespace: str, job_name: str, pods: Sequence[PodObservation],
                              live_uid: str | None = None) -> None:
        """Drop the finalizer of the Workloads labelled with a deleted job ``job_name`` (any but the live
        job of that name's, ``live_uid``) once no pod of theirs holds resources."""
        if self._watch is None:
            return
        for body in self._watch.of_job(namespace, job_name):
            meta = body.get("metadata") or {}
            if live_uid is not None and ownership(meta, live_uid, job_name) == OURS:
                continue
            patch = orphan_finalizer_patch(body, pods)
            if patch is not None:
                await self._patch(namespace, str(meta.get("name")), patch, False, "owner deleted")

    def forget(self, uid: str) -> None:
        self._made.pop(uid, None)
