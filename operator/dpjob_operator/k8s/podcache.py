"""A label-selected list+watch of rank pods, kept as small ``PodObservation`` records.

Why not a kopf handler or index on Pods: kopf watches every pod of the watched namespaces and
filters client-side, and change-detecting handlers on a child kind write annotations that
re-trigger themselves. This watch asks the API server only for pods labelled
``app.kubernetes.io/managed-by=dpjob-operator`` and stores a few fields per pod.

The list and watch are a ``reflector``'s (daemon threads); the cache calls
``on_change(namespace, job_name, urgent)`` for every event that changed what it holds,
which the controller turns into a queued reconcile: at once when ``urgent``, else after a short
batch period (``api/pod_changes.py`` says which is which, and why). The controller waits for
the first full list, so no reconcile ever acts on an empty cache after an operator restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api.inplace_cause import carry_cause
from dpjob_operator.api.observed import PodObservation, observe_pod
from dpjob_operator.api.pod_changes import PodChange, classify
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.listing import PODS
from dpjob_operator.k8s.reflector import Reflector

SELECTOR = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY},{c.LABEL_JOB}"

JobKey = tuple[str, str]


class PodCache:
    def __init__(self, kube: KubeClient, on_change: Callable[[str, str, bool], None],
                 namespaces: tuple[str, ...] = ()) -> None:
        self._on_change = on_change
        self._lock = threading.Lock()
        self._by_job: dict[JobKey, dict[str, PodObservation]] = {}
        self._reflector = Reflector(kube, PODS, SELECTOR, namespaces, self._relisted, self._event)
        self.start, self.stop = self._reflector.start, self._reflector.stop
        self.stuck, self.wait_synced = self._reflector.stuck, self._reflector.wait_synced

    # ---- reading --------------------------------------------------------------------------

    def pods_for(self, namespace: str, job_name: str) -> list[PodObservation]:
        with self._lock:
            return list(self._by_job.get((namespace, job_name), {}).values())

    def jobs_on(self, node: str) -> list[JobKey]:
        """Every job with a pod bound to ``node`` (a scan: asked only when a node's health changes)."""
        with self._lock:
            return sorted(key for key, pods in self._by_job.items() if any(p.node == node for p in pods.values()))

    def node_changed(self, node: str) -> None:
        """The node watch's callback: ``node``'s health or NoExecute taints changed, or it went. Every
        job with a pod on it wants a pass at once (reconcile/node_loss.py)."""
        for namespace, job_name in self.jobs_on(node):
            self._on_change(namespace, job_name, True)

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
                after = pods[name] = carry_cause(before, after)
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

    def _relisted(self, namespace: str | None, items: list[dict[str, Any]]) -> None:
        for key in self._replace_namespace(namespace, items):
            self._on_change(*key, True)  # a relist may hide any change: look at once

    def _event(self, event_type: str, pod: dict[str, Any]) -> None:
        changed = self._apply(event_type, pod)
        if changed:
            (ns, job_name), change = changed
            self._on_change(ns, job_name, change is PodChange.URGENT)
