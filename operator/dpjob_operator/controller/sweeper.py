"""The job sweep: drop jobs that were deleted while no watch was running.

kopf re-lists jobs after a watch error and reports what exists, but a job deleted during the gap
produces no DELETED event: the controller would keep it in memory for ever, retrying status
writes that 404, polling its rank 0 for progress and counting it in ``dpjob_jobs``. client-go's
informers compare the relist with the cache (``Replace``); this does the same for the job cache,
with one list of jobs every ``period`` seconds while this replica leads. A key whose uid differs
(deleted and re-created under the same name) is dropped too: the watch brings the new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, MutableMapping
from typing import Any

from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.jobs import JobKey, job_uids

log = logging.getLogger("dpjob.controller")


class JobSweeper:
    def __init__(self, kube: KubeClient, blocking: Blocking, jobs: MutableMapping[JobKey, dict[str, Any]],
                 forget: Callable[[JobKey, str], None], namespaces: tuple[str, ...]) -> None:
        self.kube, self.blocking, self.jobs, self.forget = kube, blocking, jobs, forget
        self.namespaces: tuple[str | None, ...] = namespaces or (None,)

    async def sweep(self) -> list[JobKey]:
        """Drop every cached job the API server no longer has; returns the keys dropped."""
        cached = {key: str((body.get("metadata") or {}).get("uid", "")) for key, body in list(self.jobs.items())}
        live: dict[JobKey, str] = {}
        for namespace in self.namespaces:
            live.update(await self.blocking.run(job_uids, self.kube, namespace))
        gone = [key for key, uid in cached.items() if live.get(key) != uid]
        for key in gone:
            body = self.jobs.get(key)
            if body is not None and str((body.get("metadata") or {}).get("uid", "")) == cached[key]:
                del self.jobs[key]  # not replaced by a newer incarnation while we listed
                self.forget(key, cached[key])
                log.info("job %s/%s is gone (deleted while no watch ran); forgotten", *key)
        return gone

    async def run(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                await self.sweep()
            except Exception as e:  # noqa: BLE001 - a failed sweep is retried next period
                log.warning("job sweep failed (%s); retrying in %.0fs", e, period)
