"""The job sweep on the real API server: jobs deleted while no watch ran are forgotten.

kopf's relist after a watch error reports the jobs that exist, never the ones that vanished in
the gap; the sweep lists jobs and drops every cached one the server no longer has (or has under
another uid: deleted and re-created), keeping the rest untouched.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client, config

from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.sweeper import JobSweeper
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.connection import tuned
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder

pytestmark = pytest.mark.integration


def test_the_sweep_forgets_jobs_the_server_no_longer_has(cluster, api, namespace):
    kept = dpj.create(api, namespace, JobBuilder("kept", namespace).obj())
    recreated = dpj.create(api, namespace, JobBuilder("again", namespace).obj())
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster), client_configuration=cfg)
    kube = KubeClient(client.ApiClient(tuned(cfg, 4)), qps=50, burst=100)
    jobs = {
        (namespace, "kept"): kept,
        (namespace, "gone"): {"metadata": {"namespace": namespace, "name": "gone", "uid": "uid-of-a-deleted-job"}},
        (namespace, "again"): {"metadata": {**recreated["metadata"], "uid": "uid-of-the-old-incarnation"}},
    }
    forgotten: list[tuple[tuple[str, str], str]] = []

    async def sweep() -> list[tuple[str, str]]:
        blocking = Blocking(asyncio.get_running_loop(), 4, 2)
        sweeper = JobSweeper(kube, blocking, jobs, lambda key, uid: forgotten.append((key, uid)), (namespace,))
        return await sweeper.sweep()

    gone = asyncio.run(sweep())
    assert sorted(gone) == [(namespace, "again"), (namespace, "gone")]
    assert list(jobs) == [(namespace, "kept")] and jobs[(namespace, "kept")] is kept
    assert sorted(forgotten) == [((namespace, "again"), "uid-of-the-old-incarnation"),
                                 ((namespace, "gone"), "uid-of-a-deleted-job")]
