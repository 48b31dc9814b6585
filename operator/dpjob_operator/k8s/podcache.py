"""A label-selected list+watch of rank pods, kept as small ``PodObservation`` records.

Why not a kopf handler or index on Pods: kopf watches every pod of the watched namespaces and
filters client-side, and change-detecting handlers on a child kind write annotations that
re-trigger themselves. This watch asks the API server only for pods labelled
``app.kubernetes.io/managed-by=dpjob-operator`` and stores a few fields per pod.

The watch runs in a daemon thread (the official client is synchronous) and calls
``on_change(namespace, job_name, urgent)`` for every event that changed what the cache holds,
which the controller turns into a queued reconcile: at once when ``urgent``, else after a short
batch period (``api/pod_changes.py`` says which is which, and why). ``synced`` is set after
the first full list, so no reconcile ever acts on an empty cache after an operator restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from dpjob_operator.api import constants as c
from dpjob_operator.api.observed import PodObservation, observe_pod
from dpjob_operator.api.pod_changes import PodChange, classify
from dpjob_operator.k8s.client import KubeClient

log = logging.getLogger("dpjob.podcache")
SELECTOR = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY},{c.LABEL_JOB}"

JobKey = tuple[str, str]


class PodCache:
    def __init__(self, kube: KubeClient, on_change: Callable[[str, str, bool], None],
                 namespaces: tuple[str, ...] = ()) -> None:
        self._kube = kube
        self._on_change = on_change
        self._namespaces = namespaces or (None,)
        self._lock = threading.Lock()
        self._by_job: dict[JobKey, dict[str, PodObservation]] = {}
        self._stop = threading.Event()
        self._synced = [threading.Event() for _ in self._namespaces]
        self._threads: list[threading.Thread] = []
        self._heartbeat = time.monotonic()  # the last sign of life of a list or watch (liveness)

    # ---- reading --------------------------------------------------------------------------

    def pods_for(self, namespace: str, job_name: str) -> list[PodObservation]:
        with self._lock:
            return list(self._by_job.get((namespace, job_name), {}).values())

    def stuck(self, limit: float) -> str | None:
        """No list or watch activity for over ``limit`` seconds: the watch is wedged (each watch
        call ends by the server's 300 s timeout or the 330 s read deadline, then starts again)."""
        quiet = time.monotonic() - self._heartbeat
        return f"the pod watch has been silent for {quiet:.0f}s" if quiet > limit else None

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for ev in self._synced:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not ev.wait(remaining):
                return False
        return True

    # ---- writing --------------------------------------------------------------------------

    def _apply(self, event_type: str, pod: dict[str, Any]) -> tuple[JobKey, PodChange] | None:
        """Store the event; the job it concerns and how soon it wants a pass (None: no pass)."""
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        job = (meta.get("labels") or {}).get(c.LABEL_JOB)
        if not job:
            return None
        key = (ns, job)
        after = None if event_type == "DELETED" else observe_pod(pod)
        with self._lock:
            pods = self._by_job.setdefault(key, {})
            before = pods.get(name)
            if after is not None:
                pods[name] = after
            elif event_type == "DELETED":
                pods.pop(name, None)
            else:
                after = before  # not a pod we can read: the cache keeps what it had
            if not pods:
                self._by_job.pop(key, None)
        change = classify(before, after)
        return None if change is PodChange.NONE else (key, change)

    def _replace_namespace(self, namespace: str | None, items: list[dict[str, Any]]) -> set[JobKey]:
        """After a (re)list: swap in what the list says, dropping what vanished while not watching.

        The new view is built aside and swapped in under the lock in one step (client-go's
        Replace): a reader never sees a namespace half-loaded, which would look like missing
        ranks and make the planner create pods that exist.
        """
        fresh: dict[JobKey, dict[str, PodObservation]] = {}
        for pod in items:
            meta = pod.get("metadata") or {}
            job = str((meta.get("labels") or {}).get(c.LABEL_JOB) or "")
            obs = observe_pod(pod) if job else None
            if obs is not None:
                fresh.setdefault((str(meta.get("namespace", "")), job), {})[obs.name] = obs
        with self._lock:
            gone = {k for k in self._by_job if namespace is None or k[0] == namespace}
            for key in gone:
                del self._by_job[key]
            self._by_job.update(fresh)
        return gone | set(fresh)

    # ---- the watch loop -------------------------------------------------------------------

    def start(self) -> None:
        for i, ns in enumerate(self._namespaces):
            t = threading.Thread(target=self._run, args=(ns, self._synced[i]), daemon=True,
                                 name=f"podcache-{ns or 'all'}")
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()

    def _run(self, namespace: str | None, synced: threading.Event) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                items, rv = self._kube.list_pods_raw(SELECTOR, namespace)
                self._heartbeat = time.monotonic()
                for key in self._replace_namespace(namespace, items):
                    self._on_change(*key, True)  # a relist may hide any change: look at once
                synced.set()
                backoff = 0.5
                while not self._stop.is_set():
                    self._heartbeat = time.monotonic()  # each watch ends by the server's timeout (300 s)
                    for event in self._kube.watch_pods_raw(SELECTOR, rv, namespace):
                        self._heartbeat = time.monotonic()
                        etype, obj = event.get("type"), event.get("object") or {}
                        if etype == "ERROR":
                            if obj.get("code") == 410:  # resourceVersion too old: relist
                                raise _Relist()
                            raise RuntimeError(f"watch error: {obj.get('message')}")
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if etype == "BOOKMARK":
                            continue
                        changed = self._apply(str(etype), obj)
                        if changed:
                            (ns, job_name), change = changed
                            self._on_change(ns, job_name, change is PodChange.URGENT)
                        if self._stop.is_set():
                            return
            except _Relist:
                log.info("pod watch expired; relisting")
            except (ApiException, OSError, RuntimeError, ValueError) as e:
                if getattr(e, "status", None) == 410:
                    continue
                log.warning("pod watch failed (%s); retrying in %.1fs", e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception:
                log.exception("pod watch crashed; retrying in %.1fs", backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)


class _Relist(Exception):
    pass
