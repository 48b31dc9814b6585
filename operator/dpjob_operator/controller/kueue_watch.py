"""The operator's Kueue Workloads, watched: a label-selected list+watch (``k8s.reflector``).

Kueue writes its verdicts (QuotaReserved, Admitted, Evicted) on the Workload, not on the job, so the
job learns of an admission only through this watch: a change of one of our Workloads queues its job
at once, as a pod's failure does. The bodies are kept (less managedFields): a pass makes its patches
from the Workload as served (its resourceVersion, its conditions), and reading it costs no GET.

Our Workloads carry the job's labels (builders/kueue_workload.py); the job's name comes from them and
its identity from the controller reference, which the reader checks (a Workload left by a previous
job of the same name is never read as this job's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api import kueue as k
from dpjob_operator.api.labels import MANAGED_POD_SELECTOR
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.listing import Resource
from dpjob_operator.k8s.reflector import Reflector

WORKLOADS = Resource(k.GROUP, k.VERSION, k.WORKLOAD_PLURAL)
SELECTOR = MANAGED_POD_SELECTOR  # every object a job of this operator owns carries these labels

Key = tuple[str, str]  # (namespace, Workload name)


def key_of(workload: dict[str, Any]) -> tuple[Key, str, str]:
    """((namespace, name), the job's name, resourceVersion)."""
    meta = workload.get("metadata") or {}
    return ((str(meta.get("namespace", "")), str(meta.get("name", ""))),
            str((meta.get("labels") or {}).get(c.LABEL_JOB, "")), str(meta.get("resourceVersion", "")))


def trimmed(workload: dict[str, Any]) -> dict[str, Any]:
    """The Workload without its managedFields (the bulk of a served object, and never read)."""
    meta = {key: value for key, value in (workload.get("metadata") or {}).items() if key != "managedFields"}
    return {**workload, "metadata": meta}


class KueueWatch:
    def __init__(self, kube: KubeClient, on_change: Callable[[str, str], None],
                 namespaces: tuple[str, ...] = ()) -> None:
        self._on_change = on_change
        self._lock = threading.Lock()
        self._bodies: dict[Key, dict[str, Any]] = {}
        self._by_job: dict[tuple[str, str], set[Key]] = {}  # (namespace, job name) -> its Workloads
        self._reflector = Reflector(kube, WORKLOADS, SELECTOR, namespaces, self._relisted, self._event)
        self.start, self.stop, self.stuck = self._reflector.start, self._reflector.stop, self._reflector.stuck
        self.wait_synced = self._reflector.wait_synced

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._bodies.get((namespace, name))

    def of_job(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        """Every Workload labelled with job ``job_name`` (this job's, or a deleted namesake's)."""
        with self._lock:
            return [self._bodies[key] for key in sorted(self._by_job.get((namespace, job_name), ()))]

    def _store(self, key: Key, body: dict[str, Any] | None) -> None:
        """Put (None: drop) one Workload, under the lock."""
        old = self._bodies.pop(key, None)
        if old is not None:
            index = (key[0], key_of(old)[1])
            self._by_job.get(index, set()).discard(key)
            if not self._by_job.get(index, True):
                del self._by_job[index]
        if body is not None:
            self._bodies[key] = body
            self._by_job.setdefault((key[0], key_of(body)[1]), set()).add(key)

    def _relisted(self, namespace: str | None, items: list[dict[str, Any]]) -> None:
        fresh = {key_of(body)[0]: trimmed(body) for body in items}
        with self._lock:
            before = {key: body for key, body in self._bodies.items() if namespace is None or key[0] == namespace}
            for key in before:
                self._store(key, None)
            for key, body in fresh.items():
                self._store(key, body)
        for key, body in fresh.items():  # what the watch may have missed: every Workload that changed
            old = before.get(key)
            if old is None or key_of(old)[2] != key_of(body)[2]:
                self._on_change(key[0], key_of(body)[1])

    def _event(self, event_type: str, workload: dict[str, Any]) -> None:
        key, job, _ = key_of(workload)
        with self._lock:
            self._store(key, None if event_type == "DELETED" else trimmed(workload))
        if job:
            self._on_change(key[0], job)
