"""The controller: job events and pod changes in, one reconcile pass per queued job key out.

The job watch (``jobcache``) feeds job events in, the pod cache pod changes (and, from the node watch, the
jobs on a node whose health changed), the PodGroup watch the scheduler's verdicts and the Kueue
Workload watch Kueue's (``pod_changed``); all only enqueue the
job's key (``workqueue``: deduplicated, one worker per key). A worker takes a key and runs one pass:
observe (``observer``), plan (pure, ``reconcile.planner``), write the status (one patch per pass,
only on change), record the events right after it (an Event never says what the status does not;
``recorder`` sends them behind the pass), then execute the actions (``executor``; a new job's first
write goes with its first children, ``reconcile.first_pass``). Decisions about jobs the planner
cannot see (invalid spec, refused pods) come from ``reconcile.refusals``; this module (and
``spec_errors``) writes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from dpjob_operator import metrics
from dpjob_operator.api.merge_patch import status_patch
from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import Job
from dpjob_operator.api.status import JobStatus
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.executor import Executor
from dpjob_operator.controller.gang_verdicts import GangVerdicts
from dpjob_operator.controller.gangs import Gangs
from dpjob_operator.controller.inplace_support import detect_restart_in_place
from dpjob_operator.controller.jobcache import JobCache
from dpjob_operator.controller.kueue import KueueWorkloads
from dpjob_operator.controller.kueue_watch import KueueWatch
from dpjob_operator.controller.observer import Observer
from dpjob_operator.controller.progress import ProgressReader
from dpjob_operator.controller.recorder import EventRecorder
from dpjob_operator.controller.reported import ReportedFailure
from dpjob_operator.controller.spec_errors import SpecErrors
from dpjob_operator.controller.timings import Timings
from dpjob_operator.controller.workqueue import WorkQueue
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.nodecache import NodeCache
from dpjob_operator.k8s.podcache import PodCache
from dpjob_operator.reconcile.actions import Plan
from dpjob_operator.reconcile.first_pass import writes_alongside
from dpjob_operator.reconcile.planner import look_again_in, plan_job
from dpjob_operator.reconcile.refusals import create_refused_status

log = logging.getLogger("dpjob.controller")
JobKey = tuple[str, str]
STALE_RETRY_SECONDS = 0.2
PASS_LIMIT = 600.0           # a pass makes bounded calls, each with a 30 s deadline


class StaleJob(Exception):
    """The status write lost an optimistic-concurrency race (409): the pass planned from an old view."""


class Controller:
    def __init__(self, cfg: OperatorConfig, kube: KubeClient, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg, self.kube, self.loop = cfg, kube, loop
        self.blocking = Blocking(loop, cfg.create_concurrency + cfg.workers + 4, cfg.create_concurrency)
        self.pods = PodCache(kube, self.pod_changed, cfg.namespaces)
        self.nodes = NodeCache(kube, self.pods.node_changed)  # a lost node wakes the jobs on it
        self.job_cache = JobCache(kube, loop, cfg.namespaces, self.enqueue, self._forget, cfg.controller_name)
        self.jobs = self.job_cache.jobs
        self.queue: WorkQueue[JobKey] = WorkQueue(metrics.CONTROLLER, loop)
        # A verdict joins the pods' batch: a Scheduled one comes with every rank's binding anyway.
        verdicts = GangVerdicts(kube, functools.partial(self.pod_changed, urgent=False), cfg.namespaces)
        self.gangs = Gangs(kube, self.blocking, memo_seconds=10 * cfg.resync_seconds, verdicts=verdicts)
        # Kueue's verdict on a Workload wakes its job at once (an admission is what a queued job waits for).
        workloads = KueueWatch(kube, functools.partial(self.pod_changed, urgent=True), cfg.namespaces)
        self.kueue = KueueWorkloads(cfg, kube, self.blocking, workloads)
        self.timings = Timings()
        self.progress = ProgressReader(self.enqueue)  # called on the loop: a new step enqueues the job
        self.observer = Observer(self.pods, self.gangs, self.progress, kube, self.blocking, cfg, self.kueue, self.nodes)
        self.executor = Executor(cfg, kube, self.blocking, self.gangs, self.timings, kueue=self.kueue)
        self.recorder = EventRecorder(kube, self.blocking)
        self.in_place_served = False  # restart in place (reconcile/inplace.py): found out in start()
        self.spec_errors = SpecErrors(self._write_status, self.recorder)  # InvalidSpec, reported once
        self._workers: list[asyncio.Task[None]] = []
        self._fenced = False
        # Only the leader counts (a standby reports zeros), so sum() over replicas counts each job once.
        self._collectors = metrics.register_job_collectors(self._counted_jobs)

    # ---- inputs ---------------------------------------------------------------------------

    def pod_changed(self, namespace: str, job_name: str, urgent: bool) -> None:
        """Called from a watch thread (pods, PodGroups): a pass now, or once the batch of progress is in."""
        delay = 0.0 if urgent else self.cfg.pod_batch_seconds
        self.loop.call_soon_threadsafe(self.enqueue, (namespace, job_name), delay)

    def enqueue(self, key: JobKey, delay: float = 0.0) -> None:
        self.queue.add_after(key, delay)

    def _forget(self, key: JobKey, uid: str) -> None:
        """Drop every per-job memo of a deleted job, so a long-lived operator does not grow."""
        self.spec_errors.forget(key)
        self.queue.forget(key)
        self.executor.forget(uid)
        self.timings.forget(uid)
        self.progress.forget(uid)
        self.observer.rank_tables.forget(uid)

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Warm up: gang-scheduling discovery, then the job, pod, PodGroup, Workload and node watches, synced. Writes
        nothing, so a standby replica does this too and is ready to work the moment it leads (``start_workers``)."""
        await self.gangs.detect(self.cfg.gang_scheduling)
        await self.kueue.detect()
        self.in_place_served = await detect_restart_in_place(self.cfg, self.kube, self.blocking)
        self.pods.start()
        self.job_cache.start()
        await self.blocking.run(self.nodes.start)
        for what, wait in (("job watch", self.job_cache.wait_synced), ("rank-pod cache", self.pods.wait_synced),
                           ("PodGroup watch", self.gangs.wait_synced),
                           ("Kueue Workload watch", self.kueue.wait_synced), ("node watch", self.nodes.wait_synced)):
            if not await asyncio.to_thread(wait, 120):
                raise RuntimeError(f"the {what} did not sync within 120s; is the API server reachable?")

    def start_workers(self) -> None:
        """Start reconciling (this replica leads). Keys queued while standing by are worked first."""
        if self._workers or self._fenced:
            return
        self.recorder.start()
        self._workers = [asyncio.create_task(self._worker()) for _ in range(self.cfg.workers)]
        log.info("controller started: %d workers, api qps=%s burst=%s, create concurrency=%d",
                 self.cfg.workers, self.cfg.api_qps, self.cfg.api_burst, self.cfg.create_concurrency)

    @property
    def working(self) -> bool:
        return bool(self._workers) and not self._fenced

    def _counted_jobs(self) -> list[dict[str, Any]]:
        return list(self.jobs.values()) if self.working else []

    def fence(self) -> None:
        """Stop writing, for good: cancel the workers and every timer, drop the API calls not yet
        started (running ones end within their request timeout). Called when leadership is lost:
        another replica may already be reconciling the same jobs."""
        self._fenced = True
        self.progress.stop()
        self.recorder.stop()
        for task in self._workers:
            task.cancel()
        self.queue.shutdown()
        self.blocking.shutdown()

    async def stop(self, drain_seconds: float = 5.0) -> None:
        """Fence, and wait a little for the API calls still running, so that a replica taking over
        after us (we release the Lease next) does not overlap with our last writes. The events
        already decided are sent first (no pass can add more once the workers are cancelled).
        ``drain_seconds=0``: a controller that never worked (its start failed) waits for nothing."""
        for task in self._workers:
            task.cancel()
        if drain_seconds > 0 and not await self.recorder.flush(drain_seconds):
            log.warning("events still queued %.0fs after stop; dropping them", drain_seconds)
        self.fence()
        if drain_seconds > 0 and not await self.blocking.drain(drain_seconds):
            log.warning("API calls still running %.0fs after stop; not waiting for them", drain_seconds)
        self.job_cache.stop()
        self.pods.stop()
        self.nodes.stop()
        self.gangs.stop()
        self.kueue.stop()
        for collector in self._collectors:  # a stopped controller reports no jobs (and can be replaced)
            metrics.REGISTRY.unregister(collector)

    def stuck(self) -> str | None:
        """Why the controller cannot make progress any more (liveness), or None."""
        return (self.job_cache.stuck() or self.pods.stuck() or self.nodes.stuck() or self.gangs.stuck()
                or self.kueue.stuck() or self.queue.stuck(PASS_LIMIT))

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            started = time.perf_counter()
            requeue: float | None = None
            try:
                requeue = await self.reconcile(key)
                self.queue.forget(key)
                metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "success").inc()
            except StaleJob:
                # Someone (a user, another writer) changed the job after we read it: nothing was
                # acted on; plan again from the newer version the watch brings.
                metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "requeue").inc()
                requeue = STALE_RETRY_SECONDS
            except Exception as e:  # noqa: BLE001 - one bad job must not stop the others: count, back off, retry
                requeue = self._on_error(key, e)
            finally:
                metrics.RECONCILE_TIME.labels(metrics.CONTROLLER).observe(time.perf_counter() - started)
                if not self.queue.done(key) and requeue is not None and key in self.jobs:
                    self.enqueue(key, requeue)

    def _on_error(self, key: JobKey, e: Exception) -> float:
        """Count the error and back off exponentially per job, or, when the job's namespace is going
        away, just look again at the next resync (nothing to fix, nothing to shout about)."""
        if errors.is_namespace_terminating(e):
            metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "requeue").inc()
            return self.cfg.resync_seconds
        delay = self.queue.backoff(key)
        metrics.RECONCILE_ERRORS.labels(metrics.CONTROLLER).inc()
        metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "error").inc()
        log.warning("reconcile of %s/%s failed (%s); retrying in %.1fs", *key, errors.describe(e), delay,
                    exc_info=not (errors.is_api_error(e) or isinstance(e, RuntimeError)))
        return delay

    # ---- one pass ---------------------------------------------------------------------------

    async def reconcile(self, key: JobKey) -> float | None:
        """One pass over the job; returns when to look again unprompted (None: not until an event)."""
        if key in self.job_cache.elsewhere:
            return None  # another controller's job (spec.managedBy): its pods prompted this pass
        body = self.jobs.get(key)
        job = await self.spec_errors.parse(key, body)
        # A deleted job's Kueue Workload (this job's, or a namesake's) is released once its pods are gone.
        await self.kueue.release_orphans(*key, self.pods.pods_for(*key), job.uid if job and not job.deleting else None)
        if body is None or job is None or job.deleting:  # a deleting job's pods go with it
            return None
        status = dict(body.get("status") or {})
        now = datetime.now(UTC)
        seen = await self.observer.observe(job, (typed := JobStatus.from_dict(status)).pod_generation, typed.phase)
        if seen.namespace_terminating:
            return None  # the job goes with its namespace: no restart, no write (its DELETED event follows)
        if (table := seen.rank_table) is not None:
            table = dataclasses.replace(table, write_error=self.executor.rank_table_write_error(job.uid))
        plan = plan_job(job, status, seen.pods, now, self.cfg.pools.get(job.spec.accelerator), table,
                        seen.gang, seen.progress, seen.nodes, self.in_place_served, seen.kueue)
        announce = functools.partial(self._announce, key, body, plan, plan.status != status)
        first = writes_alongside(status)  # a new job's: sent with its Service, rank table and Workload
        if not first:
            await announce()
        await self._execute(key, job, body, plan, seen.pods, announce if first else None)
        self.timings.observe_pass(job, status, plan)
        if table is not None and table.write_error and self.executor.rank_table_write_error(job.uid) is None:
            return 0.0  # the table is stored now: say so at once instead of at the next resync
        return look_again_in(job, plan, now, self.cfg.resync_seconds)

    async def _announce(self, key: JobKey, body: dict[str, Any], plan: Plan, changed: bool) -> None:
        """The pass's status (when it changed), then its events: the status now says what they announce."""
        if changed:
            await self._write_status(key, body, plan.status)
        self.recorder.record(body, plan.events)

    async def _execute(self, key: JobKey, job: Job, body: dict[str, Any], plan: Plan,
                       pods: Sequence[PodObservation], first_write: Callable[[], Awaitable[None]] | None) -> None:
        """The plan's actions; refused pods are written into the status (then announced) before the
        failure goes on to the worker's backoff."""
        try:
            await self.executor.execute(job, plan, pods, first_write)
        except ReportedFailure as failure:
            if failure.report is not None:
                current = self.jobs.get(key, body)
                refused = create_refused_status(current.get("status") or {}, failure.report,
                                                datetime.now(UTC), job.generation, failure.reason, failure.condition)
                await self._write_status(key, current, refused.status)
                self.recorder.record(body, refused.events)
            raise

    async def _write_status(self, key: JobKey, body: dict[str, Any], status: dict[str, Any]) -> None:
        """Write the pass's status with optimistic concurrency: the plan came from ``body``'s view,
        so the write only lands if the job is still that version (StaleJob otherwise)."""
        meta = body["metadata"]
        # What changed since ``body``, the view the resourceVersion pins; a dropped field (any depth) as null.
        patch = status_patch(body.get("status") or {}, status)
        try:
            stored = await self.blocking.run(self.kube.patch_job_status, meta["namespace"], meta["name"], patch,
                                             meta.get("resourceVersion"))
        except errors.ApiError as e:
            if errors.is_conflict(e):
                raise StaleJob(key) from e
            raise
        # Hold the server's answer so the next pass does not plan from an older status
        # (the watch event for this write may arrive after the next pass starts).
        if self.jobs.get(key) is body:
            self.jobs[key] = stored
