"""Rank pods in and out: the executor's create and delete, with the Job controller's expectations.

A pass acts on the watch-fed pod cache, which trails the API server. What this pass's
predecessors created or deleted and the cache does not show yet is in ``Expectations``; it is
neither created nor deleted again (see controller/expectations.py for why and for how long).
Every other decision stays the planner's: this module only drops repeats of calls already made.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from dpjob_operator import metrics
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.expectations import Expectations
from dpjob_operator.controller.reported import PodCreationFailed, ReportedOnce
from dpjob_operator.controller.timings import Timings
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.actions import CreatePods, DeletePods
from dpjob_operator.reconcile.claims import FOREIGN, ownership
from dpjob_operator.reconcile.reasons import POD_NAME_CONFLICT
from dpjob_operator.reconcile.refusals import create_refused_message


class PodWriter:
    def __init__(self, cfg: OperatorConfig, kube: KubeClient, blocking: Blocking, timings: Timings,
                 reported: ReportedOnce, expectations: Expectations) -> None:
        self.cfg, self.kube, self.blocking, self.timings = cfg, kube, blocking, timings
        self.reported = reported
        self.expectations = expectations

    async def create(self, job: Job, action: CreatePods) -> None:
        """Create the missing ranks in parallel; a failure raises ``PodCreationFailed`` after all were tried."""
        pool = self.cfg.pools[job.spec.accelerator]
        awaited = self.expectations.awaited_creations(job.uid, action.restart)
        pods = [build_rank_pod(job, i, action.restart, pool, self.cfg.cluster_domain, action.pod_group,
                               action.avoid_nodes, action.in_place, action.admission) for i in action.indexes]
        pods = [pod for pod in pods if pod["metadata"]["name"] not in awaited]
        self.timings.gang_started(job.uid, action.restart)
        results = await self.blocking.bounded([functools.partial(self.kube.create_pod, pod) for pod in pods])
        made = [pod["metadata"]["name"] for pod, r in zip(pods, results, strict=True) if r is True]
        self.expectations.created(job.uid, action.restart, made)
        metrics.PODS_CREATED.inc(len(made))
        failures = [r for r in results if isinstance(r, BaseException)]
        taken = [pod["metadata"]["name"] for pod, r in zip(pods, results, strict=True) if r is False]
        if taken and not failures:
            await self._claim_existing(job, taken)
        if not failures:
            self.reported.clear(job.uid)
            self.timings.gang_created(job.uid, action.restart)  # the awaited ones were created before
            return
        first = failures[0]
        if errors.is_namespace_terminating(first):
            raise first  # not the user's template: the namespace is going away
        server_message = errors.api_message(first)
        report = None
        if errors.is_refusal(first):
            # The cluster refused the pod (quota, admission, invalid template): the user must hear it, once.
            report = self.reported.first_time(job.uid, create_refused_message(len(failures), len(pods),
                                                                              server_message))
        raise PodCreationFailed(len(failures), len(pods), server_message, report)

    async def delete(self, job: Job, action: DeletePods, observed: Sequence[PodObservation]) -> None:
        """Delete the named pods, but not again those whose deletion the cache has yet to show.
        A pod that would not go is retried on the next pass (it is still observed, still stale)."""
        awaited = self.expectations.awaited_deletions(job.uid)
        names = [name for name in action.names if name not in awaited]
        grace = 0 if action.force else None  # force: the node is down and will never confirm
        uids = {p.name: p.uid for p in observed if p.owner_uid == job.uid and p.name in names}
        # By UID: the pod the plan saw, never a newer one of the same name (the next gang's rank).
        results = await self.blocking.bounded([functools.partial(self.kube.delete_pod, job.namespace, name, grace,
                                                                 uids.get(name)) for name in names])
        accepted = [name for name, r in zip(names, results, strict=True) if r is True]
        self.expectations.deleted(job.uid, {uids[name]: name for name in accepted if name in uids})
        metrics.PODS_DELETED.labels(action.reason).inc(len(accepted))
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:  # never counted as done: the pass fails and is retried with backoff
            raise failures[0]

    async def _claim_existing(self, job: Job, names: list[str]) -> None:
        """A 409 on create: the name is taken. Ours (an earlier pass made it) is fine; anyone else's
        is never adopted (the Job controller's rule): the user hears which pod blocks which rank."""
        for name in names:
            body = await self.blocking.run(self.kube.read_raw, "Pod", job.namespace, name)
            meta = (body or {}).get("metadata") or {}
            if body is None or ownership(meta, job.uid, job.name) != FOREIGN:
                continue  # gone, ours, or a previous job's still terminating: the planner waits
            owner = next((str(ref.get("uid")) for ref in meta.get("ownerReferences") or [] if ref.get("controller")),
                         "none")
            message = (f"pod {name} exists but is not controlled by this job (controller uid {owner}); "
                       f"delete it or rename the job: the operator never adopts a pod")
            raise PodCreationFailed(1, len(names), message, self.reported.first_time(job.uid, message),
                                    POD_NAME_CONFLICT)
