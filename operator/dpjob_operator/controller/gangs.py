"""A job's gang on the API server: its Workload and PodGroups (see ``builders.gang`` for why).

Creating them is remembered per (job uid, generation), so a steady job costs no API call per
pass. The scheduler's verdict on a PodGroup comes from a watch of our PodGroups
(``gang_verdicts``): a verdict that appears or changes queues a pass, and reading it costs
nothing. The controller starts work only once that watch has listed (``wait_synced``), as it does
for the pod cache, so there is no second, polled path to the same fact.

Claimed by controller UID like every child (``reconcile/claims.py``): a Workload or PodGroup of
our name that this job does not control is never used, replaced or deleted; ``claim`` (the
executor's) raises to wait for a previous job's or to report anyone else's.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dpjob_operator.api.constants import LABEL_JOB
from dpjob_operator.api.labels import selector
from dpjob_operator.api.names import pod_group_name, workload_name
from dpjob_operator.api.observed import GangObservation, PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.builders import gang as gang_builders
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.children import Claim, create_or_claim
from dpjob_operator.controller.gang_verdicts import GangVerdicts
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.actions import EnsureGang
from dpjob_operator.reconcile.claims import OURS, ownership

log = logging.getLogger("dpjob.controller")
GROUP, VERSION = gang_builders.SCHEDULING_GROUP, gang_builders.SCHEDULING_VERSION


class Gangs:
    def __init__(self, kube: KubeClient, blocking: Blocking, memo_seconds: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, verdicts: GangVerdicts | None = None) -> None:
        self.kube = kube
        self.blocking = blocking
        self.verdicts = verdicts  # the PodGroup watch, if the caller wants one
        self._watch: GangVerdicts | None = None  # the same, once started (the server serves PodGroups)
        self.memo_seconds = memo_seconds  # a Workload known this long ago is made sure of again
        self._clock = clock
        self.supported = False                         # the server schedules PodGroups
        self._pod_groups: set[tuple[str, int]] = set()  # (uid, restart) whose Workload and PodGroup exist
        self._workloads: dict[str, tuple[dict[str, Any], float]] = {}  # uid -> (Workload made sure of, when)

    async def detect(self, mode: str) -> bool:
        """Whether to gang-schedule at all: the operator's config allows it and the server serves PodGroups."""
        if mode == "auto":
            self.supported = await self.blocking.run(self.kube.serves, GROUP, VERSION, "podgroups")
        if self.supported:
            log.info("gang scheduling: PodGroups (%s/%s)", GROUP, VERSION)
            if self.verdicts is not None:
                self.verdicts.start()
                self._watch = self.verdicts
        else:
            why = ("disabled in the operator's config" if mode == "disabled" else
                   f"the API server does not serve {GROUP}/{VERSION} podgroups")
            log.info("gang scheduling: off (%s)", why)
        return self.supported

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def wait_synced(self, timeout: float) -> bool:
        """The PodGroup watch has listed once (True at once where there is none to wait for)."""
        return self._watch is None or self._watch.wait_synced(timeout)

    def stuck(self) -> str | None:
        """The PodGroup watch is wedged (liveness), or None."""
        return self._watch.stuck() if self._watch is not None else None

    def enabled_for(self, job: Job) -> bool:
        return gang_builders.gang_enabled(job, self.supported)

    def observe(self, job: Job, gen: int, pods: Sequence[PodObservation]) -> GangObservation:
        """The scheduler's verdict on the gang, read from the watch while some rank of our PodGroup is
        unbound (once every rank is bound, the verdict no longer decides anything). The watch gives
        it only for a PodGroup this job controls, so a restarted operator reads it at its first pass."""
        unbound = any(p.restart == gen and not p.deleting and not p.node and p.pod_group for p in pods)
        verdict = None
        if unbound and self._watch is not None:
            verdict = self._watch.verdict(job.namespace, pod_group_name(job.name, gen), job.uid)
        return GangObservation(gang_builders.gang_min_count(job), verdict)

    async def ensure(self, job: Job, action: EnsureGang, claim: Claim) -> None:
        """Workload (recreated when the gang size changed: it is immutable), then this generation's
        PodGroup, then drop older generations' PodGroups. Once per gang, remembered.

        Create first, read only on a 409: a new job's gang costs two POSTs, no GET or LIST before
        them (the round trips a pass waits on are what its latency is made of under load). A
        first generation has no older PodGroups of this job to drop."""
        if (job.uid, action.restart) in self._pod_groups:
            return
        await self.ensure_workload(job, claim)
        # Only then the PodGroup: the API server's admission refuses a PodGroup whose Workload does not
        # exist yet (403 "PodGroup rejected: Workload ... not found"), so the two cannot go together.
        group = gang_builders.build_pod_group(job, action.restart)
        await self._create(job, "PodGroup", "podgroups", group, claim)
        if action.restart > 0:
            await self._delete_pod_groups(job, keep=group["metadata"]["name"])
        self._pod_groups.add((job.uid, action.restart))

    async def ensure_workload(self, job: Job, claim: Claim) -> None:
        """The job's Workload, unless known to match: a restart of the same gang size soon after costs
        no POST and no 409. Later, or resized (its templates are immutable: deleted and recreated),
        it is made sure of again, so a Workload someone deleted comes back with the next gang. Also
        sent alone, beside a new job's first status write (``reconcile/first_pass.py``)."""
        workload = gang_builders.build_workload(job)
        known = self._workloads.get(job.uid)
        if known is not None and known[0] == workload and self._clock() - known[1] <= self.memo_seconds:
            return
        existing = await self._create(job, "Workload", "workloads", workload, claim)
        if existing is not None and not gang_builders.workload_matches(existing, job):
            await self.blocking.run(self.kube.delete_object, GROUP, VERSION, "workloads", job.namespace,
                                    workload["metadata"]["name"])
            await self._create(job, "Workload", "workloads", workload, claim)
        self._workloads[job.uid] = (workload, self._clock())

    async def _create(self, job: Job, kind: str, plural: str, obj: Mapping[str, Any],
                      claim: Claim) -> dict[str, Any] | None:
        """``children.create_or_claim``: None when created, else the object (ours) already there."""
        name = obj["metadata"]["name"]
        return await create_or_claim(
            kind, name, functools.partial(self.blocking.run, self.kube.create_object, GROUP, VERSION, plural, obj),
            functools.partial(self.blocking.run, self.kube.get_object, GROUP, VERSION, plural, job.namespace, name),
            claim)

    async def release(self, job: Job) -> None:
        """Nothing left to schedule: every PodGroup and the Workload of this job go (no one else's)."""
        await self._delete_pod_groups(job)
        name = workload_name(job.name)
        workload = await self.blocking.run(self.kube.get_object, GROUP, VERSION, "workloads", job.namespace, name)
        if workload is not None and ownership(workload.get("metadata") or {}, job.uid, job.name) == OURS:
            await self.blocking.run(self.kube.delete_object, GROUP, VERSION, "workloads", job.namespace, name)
        self.forget(job.uid)

    async def _delete_pod_groups(self, job: Job, keep: str | None = None) -> None:
        """Every PodGroup this job controls but ``keep`` (older generations'; all on release). The
        label finds candidates; the controller UID decides: a labelled look-alike is not ours."""
        groups = await self.blocking.run(self.kube.list_objects, GROUP, VERSION, "podgroups", job.namespace,
                                         selector({LABEL_JOB: job.name}))
        for group in groups:
            meta = group.get("metadata") or {}
            if meta.get("name") != keep and ownership(meta, job.uid, job.name) == OURS:
                await self.blocking.run(self.kube.delete_object, GROUP, VERSION, "podgroups", job.namespace,
                                        meta["name"])

    def forget(self, uid: str) -> None:
        self._pod_groups = {g for g in self._pod_groups if g[0] != uid}
        self._workloads.pop(uid, None)
