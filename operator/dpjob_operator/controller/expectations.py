"""Expectations: the pod creations and deletions a job made that its pod cache has not shown yet.

The Kubernetes Job and ReplicaSet controllers keep the same ledger (``ControllerExpectations``).
A pass acts on the watch-fed cache, and the watch trails the API server's answers: right after
a pass created 512 rank pods, the next pass (prompted by the first pods' events) still misses
most of them, and without a ledger it POSTs them again (a 409 each, then a GET to claim it); right
after a gang restart deleted 512 pods, the next passes see them not yet terminating and DELETE
them again. Measured at 512 ranks: 1,541 pod DELETEs and 1,044 POSTs for one gang restart.

A creation is expected until the cache holds a pod of that name and gang generation; a deletion
until the cache no longer holds that pod (by UID) un-deleted. Either is forgotten after
``timeout`` seconds: a missed watch event then costs one idempotent call (a 409, or a 404), never
a job stuck waiting for an event that will not come. Not persisted: after an operator restart
the first pass acts on a freshly listed cache, as the Job controller does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from dpjob_operator.api.observed import PodObservation

# Long enough for a watch that trails the API server under load (seconds at 4,096 pods on two
# cores), short enough that a lost event costs little. client-go waits 5 minutes because its
# controllers cannot tell a duplicate create from a new one; ours are idempotent by name.
EXPECTATION_TIMEOUT = 30.0


class Expectations:
    def __init__(self, timeout: float = EXPECTATION_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._creations: dict[str, dict[tuple[str, int], float]] = {}  # job uid -> (pod name, generation) -> since
        self._deletions: dict[str, dict[str, tuple[str, float]]] = {}   # job uid -> pod uid -> (pod name, since)

    def settle(self, job_uid: str, pods: Sequence[PodObservation]) -> None:
        """Drop what ``pods`` (the cache's view of the job) now shows, and what has timed out.
        Costs nothing for a job with no expectation pending (every idle pass)."""
        creations, deletions = self._creations.get(job_uid), self._deletions.get(job_uid)
        if not creations and not deletions:
            return
        oldest = self._clock() - self.timeout
        if creations:
            seen = {(p.name, p.restart) for p in pods if p.owner_uid == job_uid}
            for key, since in list(creations.items()):
                if key in seen or since < oldest:
                    del creations[key]
        if deletions:
            standing = {p.uid for p in pods if not p.deleting}
            for pod_uid, (_name, since) in list(deletions.items()):
                if pod_uid not in standing or since < oldest:
                    del deletions[pod_uid]
        self._drop_empty(job_uid)

    def awaited_creations(self, job_uid: str, generation: int) -> set[str]:
        """Names of generation ``generation`` created but not seen yet: not to be created again."""
        return {name for name, gen in self._creations.get(job_uid, {}) if gen == generation}

    def awaited_deletions(self, job_uid: str) -> set[str]:
        """Names of pods deleted but still seen standing: not to be deleted again."""
        return {name for name, _since in self._deletions.get(job_uid, {}).values()}

    def created(self, job_uid: str, generation: int, names: Iterable[str]) -> None:
        now = self._clock()
        ledger = self._creations.setdefault(job_uid, {})
        for name in names:
            ledger[(name, generation)] = now
        self._drop_empty(job_uid)

    def deleted(self, job_uid: str, pod_uids: Mapping[str, str]) -> None:
        """``pod_uids``: pod uid -> pod name, for the deletions the API server accepted."""
        now = self._clock()
        ledger = self._deletions.setdefault(job_uid, {})
        for pod_uid, name in pod_uids.items():
            ledger[pod_uid] = (name, now)
        self._drop_empty(job_uid)

    def forget(self, job_uid: str) -> None:
        self._creations.pop(job_uid, None)
        self._deletions.pop(job_uid, None)

    def pending(self) -> int:
        """How many creations and deletions are awaited in all (for tests and the debug log)."""
        return sum(map(len, self._creations.values())) + sum(map(len, self._deletions.values()))

    def _drop_empty(self, job_uid: str) -> None:
        if not self._creations.get(job_uid):
            self._creations.pop(job_uid, None)
        if not self._deletions.get(job_uid):
            self._deletions.pop(job_uid, None)
