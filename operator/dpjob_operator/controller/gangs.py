"""A job's gang on the API server: its Workload and PodGroups (see ``builders.gang`` for why).

Creating them is remembered per (job uid, generation), so a steady job costs no API call per
pass; the scheduler's verdict is read from the PodGroup only while some rank of it is unbound,
the one moment it can tell us something the pods do not.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from dpjob_operator.api.constants import LABEL_JOB
from dpjob_operator.api.labels import selector
from dpjob_operator.api.names import pod_group_name, workload_name
from dpjob_operator.api.observed import GangObservation, PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.builders import gang as gang_builders
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.actions import EnsureGang

log = logging.getLogger("dpjob.controller")
GROUP, VERSION = gang_builders.SCHEDULING_GROUP, gang_builders.SCHEDULING_VERSION


class Gangs:
    def __init__(self, kube: KubeClient, blocking: Blocking) -> None:
        self.kube = kube
        self.blocking = blocking
        self.supported = False                         # the server schedules PodGroups
        self._pod_groups: set[tuple[str, int]] = set()  # (uid, restart) whose Workload and PodGroup exist

    async def detect(self, mode: str) -> bool:
        """Whether to gang-schedule at all: the operator's config allows it and the server serves PodGroups."""
        if mode == "auto":
            self.supported = await self.blocking.run(self.kube.serves, GROUP, VERSION, "podgroups")
        if self.supported:
            log.info("gang scheduling: PodGroups (%s/%s)", GROUP, VERSION)
        else:
            why = ("disabled in the operator's config" if mode == "disabled" else
                   f"the API server does not serve {GROUP}/{VERSION} podgroups")
            log.info("gang scheduling: off (%s)", why)
        return self.supported

    def enabled_for(self, job: Job) -> bool:
        return gang_builders.gang_enabled(job, self.supported)

    async def observe(self, job: Job, gen: int, pods: Sequence[PodObservation]) -> tuple[GangObservation, bool]:
        """The scheduler's verdict on the gang, read only while some rank of our PodGroup is unbound;
        and whether we are still waiting for its first verdict (then the job is looked at again soon)."""
        unbound = [p for p in pods if p.restart == gen and not p.deleting and not p.node and p.pod_group]
        verdict = None
        if unbound and (job.uid, gen) in self._pod_groups:
            group = await self.blocking.run(self.kube.get_object, GROUP, VERSION, "podgroups", job.namespace,
                                            pod_group_name(job.name, gen))
            verdict = gang_builders.pod_group_condition(group)
        return GangObservation(gang_builders.gang_min_count(job), verdict), bool(unbound) and verdict is None

    async def ensure(self, job: Job, action: EnsureGang) -> None:
        """Workload (recreated when the gang size changed: it is immutable), then this generation's
        PodGroup, then drop older generations' PodGroups. Once per gang, remembered."""
        if (job.uid, action.restart) in self._pod_groups:
            return
        name = workload_name(job.name)
        existing: dict[str, Any] | None = await self.blocking.run(
            self.kube.get_object, GROUP, VERSION, "workloads", job.namespace, name)
        if existing is not None and not gang_builders.workload_matches(existing, job):
            await self.blocking.run(self.kube.delete_object, GROUP, VERSION, "workloads", job.namespace, name)
            existing = None
        if existing is None:
            await self.blocking.run(self.kube.create_object, GROUP, VERSION, "workloads",
                                    gang_builders.build_workload(job))
        group = gang_builders.build_pod_group(job, action.restart)
        await self.blocking.run(self.kube.create_object, GROUP, VERSION, "podgroups", group)
        await self._delete_pod_groups(job, keep=group["metadata"]["name"])
        self._pod_groups.add((job.uid, action.restart))

    async def release(self, job: Job) -> None:
        """Nothing left to schedule: every PodGroup and the Workload go."""
        await self._delete_pod_groups(job)
        await self.blocking.run(self.kube.delete_object, GROUP, VERSION, "workloads", job.namespace,
                                workload_name(job.name))
        self.forget(job.uid)

    async def _delete_pod_groups(self, job: Job, keep: str | None = None) -> None:
        """Every PodGroup of the job but ``keep`` (older generations'; all on release)."""
        names = await self.blocking.run(self.kube.list_object_names, GROUP, VERSION, "podgroups", job.namespace,
                                        selector({LABEL_JOB: job.name}))
        for name in names:
            if name != keep:
                await self.blocking.run(self.kube.delete_object, GROUP, VERSION, "podgroups", job.namespace, name)

    def forget(self, uid: str) -> None:
        self._pod_groups = {g for g in self._pod_groups if g[0] != uid}
