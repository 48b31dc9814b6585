"""Plan actions -> API calls, through one handler per action type.

The executor remembers, per job, what it already made sure of (the Service exists, the rank
table ConfigMaps hold these bytes, this gang's PodGroup exists), so a steady job's resync costs
no write; ``forget(uid)`` drops it all when the job is deleted. Everything is idempotent on the
server side too (create-if-absent, 404 on delete is fine), so a lost memo only costs a call.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpjob_operator.api.names import env_configmap_name
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.configmaps import build_ranktable_configmaps
from dpjob_operator.builders.pods import build_headless_service
from dpjob_operator.builders.shared_env import build_env_configmap
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking, together
from dpjob_operator.controller.child_failures import (
    ChildConflict,
    EnvironmentWriteFailed,
    PriorityClassNotFound,
    RankTableWriteFailed,
    WaitingForPrevious,
)
from dpjob_operator.controller.children import create_or_claim, read_and_claim
from dpjob_operator.controller.clock import SYSTEM_CLOCK, Clock
from dpjob_operator.controller.expectations import Expectations
from dpjob_operator.controller.gangs import Gangs
from dpjob_operator.controller.kueue import KueueWorkloads
from dpjob_operator.controller.network_policies import NetworkPolicies
from dpjob_operator.controller.podwriter import PodWriter
from dpjob_operator.controller.reported import ReportedFailure, ReportedOnce
from dpjob_operator.controller.timings import Timings
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.actions import (
    ApplyRankTable,
    CreatePods,
    DeleteJob,
    DeleteKueueWorkload,
    DeletePods,
    EnsureEnvironment,
    EnsureGang,
    EnsureKueueWorkload,
    EnsureNetworkPolicy,
    EnsureService,
    PatchKueueWorkload,
    Plan,
    ReleaseGang,
)
from dpjob_operator.reconcile.claims import OURS, PREVIOUS, conflict_message, ownership

log = logging.getLogger("dpjob.controller")


@dataclass(frozen=True)
class PassFacts:
    """What every handler may need besides its action: the plan's gang generation and the pods the
    pass observed (a deletion is remembered by pod UID, see controller/expectations.py)."""

    restart: int
    pods: Sequence[PodObservation] = ()


Handler = Callable[[Job, Any, PassFacts], Awaitable[None]]
# Actions that depend on no other: a plan's leading run of them is sent at once. The pods come
# after (they name the PodGroup and mount the rank table), each in plan order.
INDEPENDENT = (EnsureService, EnsureNetworkPolicy, EnsureEnvironment, ApplyRankTable, EnsureGang, EnsureKueueWorkload)


class Executor:
    def __init__(self, cfg: OperatorConfig, kube: KubeClient, blocking: Blocking, gangs: Gangs,
                 timings: Timings, clock: Clock = SYSTEM_CLOCK, kueue: KueueWorkloads | None = None) -> None:
        self.cfg = cfg
        self.kube = kube
        self.blocking = blocking
        self.gangs = gangs
        self.timings = timings
        # One clock for the memos below and the expectations: a fake one in tests expires both.
        self._now = clock.monotonic
        # job uid -> when its Service was last known to exist; re-checked after memo_seconds, so a
        # Service someone deleted comes back within minutes, not at the next operator restart.
        self._services: dict[str, float] = {}
        self.memo_seconds = 10 * cfg.resync_seconds
        self._tables: dict[tuple[str, str], tuple[dict[str, str], float]] = {}  # (uid, configmap) -> (data, checked)
        self.reported = ReportedOnce()                            # uid -> the refusal last reported
        self.expectations = Expectations(clock=clock.monotonic)
        self.pods = PodWriter(cfg, kube, blocking, timings, self.reported, self.expectations)
        self._table_errors: dict[str, tuple[str, str]] = {}       # uid -> (reason, why) the last write failed
        self.policies = NetworkPolicies(cfg, kube, blocking, clock.monotonic)
        self.kueue = kueue or KueueWorkloads(cfg, kube, blocking)  # the default: off
        self.handlers: Mapping[type, Handler] = {
            EnsureService: self._ensure_service,
            EnsureNetworkPolicy: lambda job, _action, _facts: self.policies.ensure(
                job, functools.partial(self._check_claim, job)),
            EnsureEnvironment: self._ensure_environment,
            ApplyRankTable: self._apply_rank_table,
            EnsureGang: self._ensure_gang,
            ReleaseGang: self._release_gang,
            CreatePods: self._create_pods,
            DeletePods: self._delete_pods,
            DeleteJob: self._delete_job,
            EnsureKueueWorkload: self._ensure_kueue_workload,
            PatchKueueWorkload: lambda job, action, _facts: self.kueue.patch(job, action),
            DeleteKueueWorkload: lambda job, action, _facts: self.kueue.delete(job, action),
        }

    async def execute(self, job: Job, plan: Plan, pods: Sequence[PodObservation] = (),
                      first_write: Callable[[], Awaitable[None]] | None = None) -> None:
        """Every action of ``plan``, in order (the independent ones it starts with together); the first
        that raises stops the rest (retried next pass). ``pods``: what the pass observed (the
        expectations settle against it first). ``first_write``: a new job's first status write, sent
        together with the part of the leading actions a stale pass cannot spoil
        (``reconcile/first_pass.py``); everything else waits for it."""
        self.expectations.settle(job.uid, pods)
        facts = PassFacts(plan.job_status.pod_generation, pods)
        calls = [functools.partial(self._handler(action), job, action, facts) for action in plan.actions]
        lead = next((i for i, a in enumerate(plan.actions) if not isinstance(a, INDEPENDENT)), len(calls))
        if first_write is not None:  # then the memos make the Service and rank table below cost no call
            await together(first_write(), *(self._before_write(job, a, facts) for a in plan.actions[:lead]))
        if lead > 1:  # a new job's Service, rank table and gang: one round trip of latency, not four
            await together(*(call() for call in calls[:lead]))
            calls = calls[lead:]
        for call in calls:
            await call()

    def _before_write(self, job: Job, action: object, facts: PassFacts) -> Awaitable[None]:
        """What of an independent action may go before the status write lands: all of it, but of a
        gang only the Workload (its PodGroup is immutable and must carry the size the write confirms)."""
        if isinstance(action, EnsureGang):
            return self.gangs.ensure_workload(job, functools.partial(self._check_claim, job))
        return self._handler(action)(job, action, facts)

    def _handler(self, action: object) -> Handler:
        handler = self.handlers.get(type(action))
        if handler is None:
            raise TypeError(f"the executor has no handler for {type(action).__name__}")
        return handler

    def forget(self, uid: str) -> None:
        """Drop every memo of a deleted job, so a long-lived operator does not grow."""
        self._services.pop(uid, None)
        self.policies.forget(uid)
        self.reported.clear(uid)
        self.expectations.forget(uid)
        self._table_errors.pop(uid, None)
        for memo in [k for k in self._tables if k[0] == uid]:
            del self._tables[memo]
        self.gangs.forget(uid)
        self.kueue.forget(uid)

    # ---- one handler per action ------------------------------------------------------------

    async def _ensure_service(self, job: Job, _action: EnsureService, _facts: PassFacts) -> None:
        checked = self._services.get(job.uid)
        if checked is None or self._now() - checked > self.memo_seconds:
            service = build_headless_service(job)
            create = functools.partial(self.blocking.run, self.kube.create_if_absent, service)
            await self._create_or_claim(job, service, create)
            self._services[job.uid] = self._now()

    async def _create_or_claim(self, job: Job, obj: Mapping[str, Any],
                               create: Callable[[], Awaitable[bool]]) -> dict[str, Any] | None:
        """``children.create_or_claim`` for a Service or ConfigMap of ``job``."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        return await create_or_claim(kind, name, create, self._reader(job, kind, name),
                                     functools.partial(self._check_claim, job))

    async def _claim_child(self, job: Job, kind: str, name: str) -> dict[str, Any] | None:
        """The object if this job controls it, None if absent (see ``_check_claim``)."""
        return await read_and_claim(kind, self._reader(job, kind, name), functools.partial(self._check_claim, job))

    def _reader(self, job: Job, kind: str, name: str) -> Callable[[], Awaitable[dict[str, Any] | None]]:
        return functools.partial(self.blocking.run, self.kube.read_raw, kind, job.namespace, name)

    def _check_claim(self, job: Job, kind: str, meta: Mapping[str, Any]) -> None:
        """Return if this job controls the object; another job's is waited for
        (``WaitingForPrevious``), anyone else's reported once (``ChildConflict``), never touched."""
        verdict = ownership(meta, job.uid, job.name)
        if verdict == OURS:
            return
        if verdict == PREVIOUS:
            raise WaitingForPrevious(f"{kind} {meta.get('name')} still belongs to a previous job named {job.name}")
        message = conflict_message(kind, meta)
        key = "environment ConfigMap" if kind == "ConfigMap" and meta.get("name") == env_configmap_name(job.name) \
            else kind
        raise ChildConflict(key, message, self.reported.first_time(job.uid, message))

    def rank_table_write_error(self, uid: str) -> tuple[str, str] | None:
        """(reason, message) of the job's last failed rank-table write, until one succeeds (for the
        planner: the condition must not say Ready, or Waiting, while the pods cannot read it)."""
        return self._table_errors.get(uid)

    async def _apply_rank_table(self, job: Job, action: ApplyRankTable, facts: PassFacts) -> None:
        """Write the table; a refusal or a name conflict is remembered (the planner reports it)."""
        try:
            await self._write_configmaps(job, build_ranktable_configmaps(job, action.files, facts.restart),
                                         RankTableWriteFailed)
        except (RankTableWriteFailed, ChildConflict) as failure:
            error = (failure.reason, str(failure))
            if self._table_errors.get(job.uid) != error:
                self._table_errors[job.uid] = error
                failure.report = str(failure)
            raise
        self._table_errors.pop(job.uid, None)

    async def _ensure_environment(self, job: Job, _action: EnsureEnvironment, _facts: PassFacts) -> None:
        """The ranks' shared environment: written once, and again only when the spec changes it."""
        cm = build_env_configmap(job, self.cfg.pools[job.spec.accelerator], self.cfg.cluster_domain)
        try:
            await self._write_configmaps(job, [cm], EnvironmentWriteFailed)
        except EnvironmentWriteFailed as failure:
            failure.report = self.reported.first_time(job.uid, str(failure))  # told once, retried with backoff
            raise

    async def _write_configmaps(self, job: Job, maps: Sequence[Mapping[str, Any]],
                                refused: Callable[[str, str, str | None], ReportedFailure]) -> None:
        """Write each ConfigMap only when its data differs from what we (or a previous operator) wrote.

        A table never seen is created straight away (a new job's: one POST, no GET first); a 409
        means it exists, and only then is it read and claimed. A known table is patched, not
        POSTed again for a 409, and re-read after ``memo_seconds`` (someone may have changed it).
        A refusal by the API server raises ``refused``."""
        for cm in maps:
            name = cm["metadata"]["name"]
            memo = (job.uid, name)
            known = self._tables.get(memo)
            if known is not None and self._now() - known[1] > self.memo_seconds:
                current = await self._claim_child(job, "ConfigMap", name)
                known = None if current is None else (current.get("data") or {}, self._now())
            if known is None:
                create = functools.partial(self._table_write, self.kube.create_if_absent, cm, refused)
                current = await self._create_or_claim(job, cm, create)  # taken: ours, or a conflict
                known = (dict(cm["data"] if current is None else current.get("data") or {}), self._now())
            if known[0] != cm["data"]:
                await self._table_write(self.kube.patch_configmap_data, cm, refused)
                known = (dict(cm["data"]), self._now())
            self._tables[memo] = known

    async def _table_write(self, write: Callable[[Mapping[str, Any]], Any], cm: Mapping[str, Any],
                           refused: Callable[[str, str, str | None], ReportedFailure]) -> Any:
        try:
            return await self.blocking.run(write, cm)
        except errors.ApiError as e:
            if errors.is_namespace_terminating(e):
                raise  # not the table's fault: the namespace and the job are going away (quiet requeue)
            if errors.is_refusal(e) or errors.status_of(e) == 413:  # too large, quota, admission
                raise refused(cm["metadata"]["name"], errors.api_message(e), None) from e
            raise  # transient: the worker's backoff retries it

    async def _ensure_gang(self, job: Job, action: EnsureGang, _facts: PassFacts) -> None:
        await self.gangs.ensure(job, action, functools.partial(self._check_claim, job))

    async def _ensure_kueue_workload(self, job: Job, _action: EnsureKueueWorkload, _facts: PassFacts) -> None:
        try:
            pool = self.cfg.pools[job.spec.accelerator]
            await self.kueue.ensure(job, pool, functools.partial(self._check_claim, job))
        except PriorityClassNotFound as failure:
            failure.report = self.reported.first_time(job.uid, str(failure))  # told once, retried with backoff
            raise

    async def _release_gang(self, job: Job, _action: ReleaseGang, _facts: PassFacts) -> None:
        await self.gangs.release(job)

    async def _delete_job(self, job: Job, action: DeleteJob, _facts: PassFacts) -> None:
        log.info("deleting %s/%s: %s", job.namespace, job.name, action.reason)
        await self.blocking.run(self.kube.delete_job, job.namespace, job.name)

    async def _create_pods(self, job: Job, action: CreatePods, _facts: PassFacts) -> None:
        await self.pods.create(job, action)

    async def _delete_pods(self, job: Job, action: DeletePods, facts: PassFacts) -> None:
        await self.pods.delete(job, action, facts.pods)
