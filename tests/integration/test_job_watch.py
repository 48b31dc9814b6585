"""The job watch (controller/jobcache.py) on the real API server: what the controller holds and queues.

A relist replaces what the controller holds, as client-go's informers do: a job deleted while no
watch ran is forgotten (else its writes would be retried and it would be counted for ever), one
deleted and created again is taken anew, one that did not change queues no pass. Then the watch
delivers a new job, a change and a deletion. The jobs are suspended, so the shared operator writes
their status once and then leaves them alone. A job another controller runs (``spec.managedBy``) is
neither held nor queued.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client, config

from dpjob_operator.controller.jobcache import JobCache
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.connection import tuned
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


def _kube(kubeconfig) -> KubeClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return KubeClient(client.ApiClient(tuned(cfg, 4)), qps=50, burst=100)


async def _until(check, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.05)


def _suspended(api, namespace: str, name: str) -> dict:
    dpj.create(api, namespace, JobBuilder(name, namespace).run_policy(suspend=True).obj())
    dpj.wait_phase(api, namespace, name, "Suspended")
    return dpj.get(api, namespace, name)


def test_the_job_watch_forgets_what_went_and_queues_only_what_changed(cluster, api, namespace, operator):
    kept, recreated = _suspended(api, namespace, "kept"), _suspended(api, namespace, "again")
    queued: list[tuple[str, str]] = []
    forgotten: list[tuple[tuple[str, str], str]] = []

    async def scenario() -> JobCache:
        cache = JobCache(_kube(cluster), asyncio.get_running_loop(), (namespace,), queued.append,
                         lambda key, uid: forgotten.append((key, uid)), dpj.controller_name())
        cache.jobs.update({  # what a controller held when its watch broke
            (namespace, "kept"): kept,
            (namespace, "gone"): {"metadata": {"namespace": namespace, "name": "gone", "uid": "uid-of-a-deleted-job"}},
            (namespace, "again"): {"metadata": {**recreated["metadata"], "uid": "uid-of-the-old-incarnation"}},
        })
        cache.start()
        try:
            assert await asyncio.to_thread(cache.wait_synced, 30)
            await _until(lambda: (namespace, "gone") not in cache.jobs)
            assert sorted(forgotten) == [((namespace, "again"), "uid-of-the-old-incarnation"),
                                         ((namespace, "gone"), "uid-of-a-deleted-job")]
            assert cache.jobs[(namespace, "kept")] is kept, "an unchanged job is not replaced"
            assert cache.jobs[(namespace, "again")]["metadata"]["uid"] == recreated["metadata"]["uid"]
            assert queued == [(namespace, "again")], "only the job taken anew is queued"

            fresh = dpj.create(api, namespace, JobBuilder("fresh", namespace).run_policy(suspend=True).obj())
            await _until(lambda: (namespace, "fresh") in queued)
            dpj.patch(api, namespace, "kept", {"metadata": {"labels": {"touched": "yes"}}})
            await _until(lambda: (namespace, "kept") in queued)
            assert cache.jobs[(namespace, "kept")]["metadata"]["labels"]["touched"] == "yes"
            dpj.delete(api, namespace, "fresh")
            await _until(lambda: (namespace, "fresh") not in cache.jobs)
            assert forgotten[-1] == ((namespace, "fresh"), fresh["metadata"]["uid"])

            dpj.create(api, namespace, JobBuilder("theirs", namespace).set("managedBy", "example.com/other").obj())
            await _until(lambda: (namespace, "theirs") in cache.elsewhere)
            assert (namespace, "theirs") not in cache.jobs and (namespace, "theirs") not in queued
        finally:
            cache.stop()
        return cache

    asyncio.run(scenario())
