"""The DataParallelJobs this replica knows, by (namespace, name): a list+watch (``k8s/reflector.py``),
the same path as the rank pods, PodGroups, Kueue Workloads and Nodes.

The reflector's thread hands every list and event to the event loop (``call_soon_threadsafe``, in
order), where the controller's queue and this dict live. ``api/event_order.py`` decides what each
does: a newer body is held and its key queued; an event of the version held (the watch delivering
our own status patch) queues nothing; DELETED forgets the job and every memo of it. A relist (at
start, after a 410 or a broken watch) replaces the namespace's jobs as client-go's ``Replace``
does: a job deleted while no watch ran is forgotten, so the controller neither retries its writes
nor counts it for ever.

A job another controller runs (``spec.managedBy``, api/managed_by.py) is not held: its key goes to
``elsewhere``, so that a pass its pods prompt does nothing at all (not even the cleanup of a
deleted job's Workload).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from dpjob_operator.api.event_order import FORGET_JOB, STORE, JobKey, job_key, on_job_event, vanished
from dpjob_operator.api.managed_by import managed_by, runs_here
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.listing import JOBS
from dpjob_operator.k8s.reflector import Reflector

log = logging.getLogger("dpjob.controller")


class JobCache:
    def __init__(self, kube: KubeClient, loop: asyncio.AbstractEventLoop, namespaces: tuple[str, ...],
                 enqueue: Callable[[JobKey], None], forget: Callable[[JobKey, str], None],
                 controller_name: str) -> None:
        self.jobs: dict[JobKey, dict[str, Any]] = {}
        self.elsewhere: dict[JobKey, str] = {}  # jobs another controller runs: key -> its name
        self._controller_name = controller_name
        self._loop, self._enqueue, self._forget = loop, enqueue, forget
        self._reflector = Reflector(kube, JOBS, "", namespaces, self._listed_in_thread, self._event_in_thread)
        self.start, self.stop = self._reflector.start, self._reflector.stop
        self.stuck, self.wait_synced = self._reflector.stuck, self._reflector.wait_synced

    def _listed_in_thread(self, namespace: str | None, items: list[dict[str, Any]]) -> None:
        self._loop.call_soon_threadsafe(self.listed, namespace, items)

    def _event_in_thread(self, event_type: str, body: dict[str, Any]) -> None:
        self._loop.call_soon_threadsafe(self.event, event_type, body)

    def event(self, event_type: str | None, body: dict[str, Any]) -> None:
        """One watch event (on the loop): hold the body and queue the job, or forget it."""
        key = job_key(body)
        meta = body.get("metadata") or {}
        if not runs_here(body, self._controller_name):
            self._another_controllers(event_type, key, body)
            return
        self.elsewhere.pop(key, None)  # a namesake this operator runs
        verdict = on_job_event(event_type, self.jobs.get(key), body)
        log.debug("job event %s %s/%s uid=%s rv=%s: %s", event_type, *key, meta.get("uid"),
                  meta.get("resourceVersion"), verdict)
        if verdict == FORGET_JOB:
            self.jobs.pop(key, None)
            self._forget(key, str(meta.get("uid", "")))
        elif verdict == STORE:
            self.jobs[key] = body
            self._enqueue(key)

    def _another_controllers(self, event_type: str | None, key: JobKey, body: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.elsewhere.pop(key, None)
            return
        if key in self.jobs:  # a namesake of a job of ours, created while no watch ran
            self._forget(key, str(self.jobs.pop(key).get("metadata", {}).get("uid", "")))
        if key not in self.elsewhere:
            log.info("job %s/%s is run by %s, not by this operator (%s): left alone", *key, managed_by(body),
                     self._controller_name)
        self.elsewhere[key] = managed_by(body)

    def listed(self, namespace: str | None, items: list[dict[str, Any]]) -> None:
        """A (re)list of ``namespace`` (None: all): forget what vanished, then take each listed job as an event."""
        listed = {job_key(body) for body in items}
        for key in [k for k in self.elsewhere if (namespace is None or k[0] == namespace) and k not in listed]:
            del self.elsewhere[key]
        for key, uid in vanished(self.jobs, namespace, items):
            del self.jobs[key]
            self._forget(key, uid)
            log.info("job %s/%s is gone (deleted while no watch ran); forgotten", *key)
        for body in items:
            self.event("ADDED", body)
