"""The controller: a work queue of jobs, a pool of workers, and the executor of plans.

kopf feeds job events in (``job_event``) and the pod cache feeds pod changes in
(``pod_changed``); both only enqueue the job's key. A worker takes a key, plans (pure, in
``reconcile.planner``) and executes: status first (one patch per pass, and only on change),
then the actions, then the events, so an Event never announces something the status does not
say. The queue is deduplicating and never hands one job to two workers at once, like
client-go's workqueue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from kubernetes.client.rest import ApiException

from dpjob_operator import metrics
from dpjob_operator.api.constants import LABEL_JOB
from dpjob_operator.api.spec import Job, SpecError, parse_job
from dpjob_operator.build import gang as gangs
from dpjob_operator.build.configmaps import build_job_rank_tables, build_ranktable_configmaps
from dpjob_operator.build.names import pod_group_name, workload_name
from dpjob_operator.build.pods import build_headless_service, build_rank_pod
from dpjob_operator.build.ranktable import RankTableError
from dpjob_operator.config import OperatorConfig
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.podcache import PodCache
from dpjob_operator.reconcile.conditions import set_condition
from dpjob_operator.reconcile.planner import (ApplyRankTable, CreatePods, DeleteJob, DeletePods, EnsureGang,
                                              EnsureService, GangObservation, Plan, RankTableOutcome, ReleaseGang,
                                              iso, next_wakeup, plan_job)

log = logging.getLogger("dpjob.controller")
JobKey = tuple[str, str]


def _rv(body: dict[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Controller:
    def __init__(self, cfg: OperatorConfig, kube: KubeClient, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.kube = kube
        self.loop = loop
        self.pool = ThreadPoolExecutor(max_workers=cfg.create_concurrency + cfg.workers + 4,
                                       thread_name_prefix="kube")
        self.pods = PodCache(kube, self.pod_changed, cfg.namespaces)
        self.jobs: dict[JobKey, dict[str, Any]] = {}
        self._queue: asyncio.Queue[JobKey] = asyncio.Queue()
        self._queued: set[JobKey] = set()
        self._active: set[JobKey] = set()
        self._dirty: set[JobKey] = set()
        self._failures: dict[JobKey, int] = {}
        self._services: set[str] = set()                 # job uids whose Service exists
        self._tables: dict[tuple[str, str], dict[str, str]] = {}  # (uid, configmap) -> data written
        self._gang_start: dict[tuple[str, int], float] = {}        # (uid, restart) -> monotonic start
        self._gang_created: set[tuple[str, int]] = set()
        self._gang_running: set[tuple[str, int]] = set()
        self.gangs_supported = False                     # the server schedules PodGroups (see build.gang)
        self._pod_groups: set[tuple[str, int]] = set()   # (uid, restart) whose Workload and PodGroup exist
        self._spec_errors: dict[JobKey, str] = {}
        self._create_errors: dict[JobKey, str] = {}
        self._workers: list[asyncio.Task] = []
        metrics.REGISTRY.register(metrics.JobsByPhase(
            lambda: [(b.get("status") or {}).get("phase") for b in list(self.jobs.values())]))
        metrics.REGISTRY.register(metrics.JobsUnschedulable(
            lambda: [b.get("status") or {} for b in list(self.jobs.values())]))

    # ---- inputs ---------------------------------------------------------------------------

    def job_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event_type == "DELETED":
            self.jobs.pop(key, None)
            self._forget(key, meta.get("uid", ""))
            return
        known = self.jobs.get(key)
        if known is not None and (known.get("metadata") or {}).get("uid") == meta.get("uid") \
                and _rv(known) > _rv(body):
            return  # older than what we already hold (our own status patch answered first)
        self.jobs[key] = body
        self.enqueue(key)

    def pod_changed(self, namespace: str, job_name: str) -> None:
        """Called from the pod-watch thread."""
        self.loop.call_soon_threadsafe(self.enqueue, (namespace, job_name))

    def enqueue(self, key: JobKey, delay: float = 0.0) -> None:
        if delay > 0:
            self.loop.call_later(delay, self.enqueue, key)
            return
        if key in self._active:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)
            metrics.WORKQUEUE_ADDS.labels(metrics.CONTROLLER).inc()
            metrics.WORKQUEUE_DEPTH.labels(metrics.CONTROLLER).set(self._queue.qsize())

    def _forget(self, key: JobKey, uid: str) -> None:
        """Drop every per-job memo of a deleted job, so a long-lived operator does not grow."""
        self._services.discard(uid)
        for memo in (self._spec_errors, self._create_errors, self._failures):
            memo.pop(key, None)
        for store in (self._tables, self._gang_start):
            for k in [k for k in store if k[0] == uid]:
                del store[k]
        for gangs_ in (self._gang_created, self._gang_running, self._pod_groups):
            gangs_.difference_update({g for g in gangs_ if g[0] == uid})

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self.cfg.gang_scheduling == "auto":
            self.gangs_supported = await asyncio.to_thread(
                self.kube.serves, gangs.SCHEDULING_GROUP, gangs.SCHEDULING_VERSION, "podgroups")
        log.info("gang scheduling: %s", "PodGroups (scheduling.k8s.io/v1alpha2)" if self.gangs_supported else
                 "off (" + ("disabled in the operator's config" if self.cfg.gang_scheduling == "disabled" else
                            "the API server does not serve scheduling.k8s.io/v1alpha2 podgroups") + ")")
        self.pods.start()
        synced = await asyncio.to_thread(self.pods.wait_synced, 120)
        if not synced:
            raise RuntimeError("the rank-pod cache did not sync within 120s; is the API server reachable?")
        self._workers = [asyncio.create_task(self._worker(i)) for i in range(self.cfg.workers)]
        log.info("controller started: %d workers, api qps=%s burst=%s, create concurrency=%d",
                 self.cfg.workers, self.cfg.api_qps, self.cfg.api_burst, self.cfg.create_concurrency)

    async def stop(self) -> None:
        self.pods.stop()
        for task in self._workers:
            task.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _worker(self, index: int) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            metrics.WORKQUEUE_DEPTH.labels(metrics.CONTROLLER).set(self._queue.qsize())
            started = time.perf_counter()
            requeue: float | None = None
            try:
                requeue = await self.reconcile(key)
                self._failures.pop(key, None)
                metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "success").inc()
            except ApiException as e:
                if not _namespace_terminating(e):
                    requeue = self._on_error(key, e)
                else:  # the job and its namespace are going away: nothing to fix, nothing to shout about
                    metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "requeue").inc()
                    requeue = self.cfg.resync_seconds
            except Exception as e:  # noqa: BLE001 - one bad job must not stop the others
                requeue = self._on_error(key, e)
            finally:
                metrics.RECONCILE_TIME.labels(metrics.CONTROLLER).observe(time.perf_counter() - started)
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.enqueue(key)
                elif requeue is not None and key in self.jobs:
                    self.enqueue(key, requeue)

    def _on_error(self, key: JobKey, e: Exception) -> float:
        """Count the error and back off exponentially per job (client-go's per-item limiter)."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        metrics.RECONCILE_ERRORS.labels(metrics.CONTROLLER).inc()
        metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "error").inc()
        delay = min(0.5 * 2 ** failures, 60.0)
        detail = f"{e.status} {_api_message(e.body)}" if isinstance(e, ApiException) else str(e)
        log.warning("reconcile of %s/%s failed (%s); retrying in %.1fs", *key, detail, delay,
                    exc_info=not isinstance(e, (ApiException, RuntimeError)))
        return delay

    # ---- one pass ---------------------------------------------------------------------------

    async def reconcile(self, key: JobKey) -> float | None:
        body = self.jobs.get(key)
        if body is None:
            return None
        try:
            job = parse_job(body)
        except SpecError as e:
            await self._report_spec_error(key, body, str(e))
            return None
        if job.deleting:
            return None
        status = dict(body.get("status") or {})
        pods = self.pods.pods_for(job.namespace, job.name)
        now = datetime.now(timezone.utc)
        gen = int(status.get("restarts", 0))
        outcome = None
        if job.spec.rank_table.format != "none":
            try:
                result = build_job_rank_tables(job, gen, pods)
                outcome = RankTableOutcome(result.ready, result.reason, result.message, result.version, result.files)
            except RankTableError as e:
                outcome = RankTableOutcome(False, "InvalidRankTableRequest", str(e), "none", {})
        gang, awaiting_verdict = None, False
        if gangs.gang_enabled(job, self.gangs_supported):
            gang, awaiting_verdict = await self._observe_gang(job, gen, pods)
        plan = plan_job(job, status, pods, now, self.cfg.pools.get(job.spec.accelerator), outcome, gang)
        if plan.status != status:
            await self._write_status(key, body, plan.status)
        await self._execute(job, body, plan)
        for event in plan.events:
            await self._run(self.kube.post_event, body, event.type, event.reason, event.message)
        self._observe(job, status, plan)
        wake = next_wakeup(job, plan.status, now)
        resync = self.cfg.resync_seconds
        if awaiting_verdict:
            # The scheduler's first verdict lands on the PodGroup, which we do not watch: look again
            # soon. Once it has judged, binding (or not) shows up as pod events.
            resync = min(resync, 5.0)
        return resync if wake is None else min(resync, wake + 0.05)

    async def _observe_gang(self, job: Job, gen: int, pods) -> tuple[GangObservation, bool]:
        """The scheduler's verdict on the gang, read only while some rank of our PodGroup is unbound;
        and whether we are still waiting for its first verdict (then the job is looked at again soon)."""
        unbound = [p for p in pods if p.restart == gen and not p.deleting and not p.node and p.pod_group]
        verdict = None
        if unbound and (job.uid, gen) in self._pod_groups:
            group = await self._run(self.kube.get_object, gangs.SCHEDULING_GROUP, gangs.SCHEDULING_VERSION,
                                    "podgroups", job.namespace, pod_group_name(job.name, gen))
            verdict = gangs.pod_group_condition(group)
        return GangObservation(gangs.gang_min_count(job), verdict), bool(unbound) and verdict is None

    async def _run(self, fn, *args):
        return await self.loop.run_in_executor(self.pool, lambda: fn(*args))

    async def _write_status(self, key: JobKey, body: dict[str, Any], status: dict[str, Any]) -> None:
        meta = body["metadata"]
        # A merge patch keeps keys it does not name: a field the plan dropped must be sent as null.
        patch = {**{k: None for k in (body.get("status") or {}) if k not in status}, **status}
        stored = await self._run(self.kube.patch_job_status, meta["namespace"], meta["name"], patch)
        # Hold the server's answer so the next pass does not plan from an older status
        # (the watch event for this write may arrive after the next pass starts).
        if self.jobs.get(key) is body:
            self.jobs[key] = stored

    async def _execute(self, job: Job, body: dict[str, Any], plan: Plan) -> None:
        gen = int(plan.status.get("restarts", 0))
        for action in plan.actions:
            if isinstance(action, EnsureService):
                if job.uid not in self._services:
                    await self._run(self.kube.create_if_absent, build_headless_service(job))
                    self._services.add(job.uid)
            elif isinstance(action, ApplyRankTable):
                for cm in build_ranktable_configmaps(job, action.files, gen):
                    memo = (job.uid, cm["metadata"]["name"])
                    if memo not in self._tables:
                        current = await self._run(self.kube.read_configmap_data, job.namespace, cm["metadata"]["name"])
                        if current is not None:
                            self._tables[memo] = current
                    if self._tables.get(memo) != cm["data"]:
                        await self._run(self.kube.apply_configmap, cm)
                        self._tables[memo] = dict(cm["data"])
            elif isinstance(action, EnsureGang):
                await self._ensure_gang(job, action)
            elif isinstance(action, ReleaseGang):
                await self._release_gang(job)
            elif isinstance(action, CreatePods):
                await self._create_pods(job, body, action)
            elif isinstance(action, DeletePods):
                await self._bounded([lambda n=name: self.kube.delete_pod(job.namespace, n) for name in action.names])
                metrics.PODS_DELETED.labels(action.reason).inc(len(action.names))
            elif isinstance(action, DeleteJob):
                log.info("deleting %s/%s: %s", job.namespace, job.name, action.reason)
                await self._run(self.kube.delete_job, job.namespace, job.name)

    async def _ensure_gang(self, job: Job, action: EnsureGang) -> None:
        """Workload (recreated when the gang size changed: it is immutable), then this generation's
        PodGroup, then drop older generations' PodGroups. Once per gang, remembered."""
        if (job.uid, action.restart) in self._pod_groups:
            return
        g, v = gangs.SCHEDULING_GROUP, gangs.SCHEDULING_VERSION
        workload = gangs.build_workload(job)
        existing = await self._run(self.kube.get_object, g, v, "workloads", job.namespace, workload_name(job.name))
        if existing is not None and not gangs.workload_matches(existing, job):
            await self._run(self.kube.delete_object, g, v, "workloads", job.namespace, workload_name(job.name))
            existing = None
        if existing is None:
            await self._run(self.kube.create_object, g, v, "workloads", workload)
        group = gangs.build_pod_group(job, action.restart)
        await self._run(self.kube.create_object, g, v, "podgroups", group)
        await self._delete_pod_groups(job, keep=group["metadata"]["name"])
        self._pod_groups.add((job.uid, action.restart))

    async def _release_gang(self, job: Job) -> None:
        await self._delete_pod_groups(job)
        await self._run(self.kube.delete_object, gangs.SCHEDULING_GROUP, gangs.SCHEDULING_VERSION, "workloads",
                        job.namespace, workload_name(job.name))
        self._pod_groups.difference_update({k for k in self._pod_groups if k[0] == job.uid})

    async def _delete_pod_groups(self, job: Job, keep: str | None = None) -> None:
        """Every PodGroup of the job but ``keep`` (older generations'; all on release)."""
        g, v = gangs.SCHEDULING_GROUP, gangs.SCHEDULING_VERSION
        names = await self._run(self.kube.list_object_names, g, v, "podgroups", job.namespace,
                                f"{LABEL_JOB}={job.name}")
        for name in names:
            if name != keep:
                await self._run(self.kube.delete_object, g, v, "podgroups", job.namespace, name)

    async def _bounded(self, calls) -> list:
        """Run blocking API calls in parallel, at most ``create_concurrency`` in flight."""
        sem = asyncio.Semaphore(self.cfg.create_concurrency)

        async def one(call):
            async with sem:
                return await self.loop.run_in_executor(self.pool, call)

        return await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)

    async def _create_pods(self, job: Job, body: dict[str, Any], action: CreatePods) -> None:
        pool = self.cfg.pools[job.spec.accelerator]
        pods = [build_rank_pod(job, i, action.restart, pool, self.cfg.cluster_domain, action.pod_group)
                for i in action.indexes]
        self._gang_start.setdefault((job.uid, action.restart), time.monotonic())
        results = await self._bounded([lambda p=p: self.kube.create_pod(p) for p in pods])
        created = sum(1 for r in results if r is True)
        metrics.PODS_CREATED.inc(created)
        errors = [r for r in results if isinstance(r, BaseException)]
        key = (job.namespace, job.name)
        if not errors:
            self._create_errors.pop(key, None)
            gang = (job.uid, action.restart)
            if gang not in self._gang_created:
                self._gang_created.add(gang)
                metrics.TIME_TO_CREATED.observe(time.monotonic() - self._gang_start[gang])
            return
        first = errors[0]
        if isinstance(first, ApiException) and _namespace_terminating(first):
            raise first  # not the user's template: the namespace is going away
        detail = getattr(first, "body", None) or str(first)
        if isinstance(first, ApiException) and first.status in (400, 403, 422):
            # The cluster refused the pod (quota, admission, invalid template): tell the user.
            msg = f"creating rank pods failed ({len(errors)} of {len(pods)}): {_api_message(detail)}"
            if self._create_errors.get(key) != msg:
                self._create_errors[key] = msg
                status = dict(self.jobs.get(key, body).get("status") or {})
                status["conditions"] = set_condition(status.get("conditions") or [], "Created", False,
                                                     "FailedCreatePod", msg, iso(datetime.now(timezone.utc)),
                                                     job.generation)
                await self._write_status(key, self.jobs.get(key, body), status)
                await self._run(self.kube.post_event, body, "Warning", "FailedCreatePod", msg)
        raise RuntimeError(f"{len(errors)} rank pod creation(s) failed: {_api_message(detail)}")

    async def _report_spec_error(self, key: JobKey, body: dict[str, Any], message: str) -> None:
        if self._spec_errors.get(key) == message:
            return
        self._spec_errors[key] = message
        status = dict(body.get("status") or {})
        now = iso(datetime.now(timezone.utc))
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        status["conditions"] = set_condition(status.get("conditions") or [], "Failed", True, "InvalidSpec",
                                             message, now, generation)
        status.update(phase="Failed", reason="InvalidSpec", message=message, completionTime=now)
        await self._write_status(key, body, status)
        await self._run(self.kube.post_event, body, "Warning", "InvalidSpec", message)

    def _observe(self, job: Job, old: dict[str, Any], plan: Plan) -> None:
        new_phase = plan.status.get("phase")
        if new_phase != old.get("phase") and new_phase:
            metrics.TRANSITIONS.labels(new_phase).inc()
        restarts_old = old.get("restartsByReason") or {}
        for reason, count in (plan.status.get("restartsByReason") or {}).items():
            if count > restarts_old.get(reason, 0):
                metrics.RESTARTS.labels(reason).inc(count - restarts_old.get(reason, 0))
        gen = int(plan.status.get("restarts", 0))
        gang = (job.uid, gen)
        if new_phase == "Running" and gang not in self._gang_running and gang in self._gang_start:
            self._gang_running.add(gang)
            metrics.TIME_TO_RUNNING.observe(time.monotonic() - self._gang_start[gang])
        if new_phase == "Restarting" and old.get("phase") != "Restarting":
            self._gang_start.setdefault(gang, time.monotonic())


def _namespace_terminating(e: ApiException) -> bool:
    return e.status == 403 and b"NamespaceTerminating" in (e.body if isinstance(e.body, bytes) else
                                                         str(e.body or "").encode())


def _api_message(detail: Any) -> str:
    import json

    if isinstance(detail, (bytes, str)):
        try:
            return json.loads(detail).get("message", str(detail))[:800]
        except (ValueError, AttributeError):
            return str(detail)[:800]
    return str(detail)[:800]
