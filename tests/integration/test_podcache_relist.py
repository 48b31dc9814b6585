"""The pod cache's relist, forced into the interleaving that used to restart healthy gangs.

A relist follows every watch error (an API-server restart, a load-balancer idle timeout, a 410).
It once cleared a namespace and refilled it pod by pod, so a reconcile in the gap saw a partial
gang and restarted it. Hoping to hit that window is not a test: here the refill is paused by a
hook in the middle of a real relist from the real API server, and the cache is read meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dpjob_operator.api import constants as c
from dpjob_operator.k8s import podcache, reflector
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.connection import tuned
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)

RANKS = 4


def _rank_pod(namespace: str, index: int) -> client.V1Pod:
    labels = {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: "train", c.LABEL_RANK: str(index),
              c.LABEL_RESTART: "0"}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"train-rank-{index}", namespace=namespace, labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(name="trainer", image="registry.k8s.io/pause:3.10")],
                              node_selector={"dpjob.io/pool": "cpu"}))


class PausingObserve:
    """Stands in for ``observe_pod`` during the relist: after ``after`` pods it blocks until released."""

    def __init__(self, real: Any, after: int) -> None:
        self.real, self.after, self.calls = real, after, 0
        self.armed = threading.Event()
        self.paused = threading.Event()
        self.release = threading.Event()

    def __call__(self, pod: dict[str, Any]) -> Any:
        if self.armed.is_set():
            self.calls += 1
            if self.calls == self.after + 1:
                self.paused.set()
                self.release.wait(30)
        return self.real(pod)


@pytest.fixture()
def kube(cluster) -> KubeClient:
    from kubernetes import config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster), client_configuration=cfg)
    return KubeClient(client.ApiClient(tuned(cfg, 4)), qps=50, burst=100)


@pytest.fixture()
def cache_with_pods(kube: KubeClient, core, namespace, monkeypatch) -> Iterator[tuple[podcache.PodCache, Any]]:
    for i in range(RANKS):
        core.create_namespaced_pod(namespace, _rank_pod(namespace, i))
    hook = PausingObserve(podcache.observe_pod, after=RANKS // 2)
    monkeypatch.setattr(podcache, "observe_pod", hook)
    watch = reflector.watch_raw
    fail_once = threading.Event()

    def watch_then_expire(*args: Any, **kwargs: Any) -> Any:
        for event in watch(*args, **kwargs):
            yield event
            if fail_once.is_set():  # the relist we force: the server says the resourceVersion is too old
                fail_once.clear()
                yield {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}

    monkeypatch.setattr(reflector, "watch_raw", watch_then_expire)
    cache = podcache.PodCache(kube, on_change=lambda ns, job, urgent: None, namespaces=(namespace,))
    cache.start()
    assert cache.wait_synced(30)
    wait_until(lambda: len(cache.pods_for(namespace, "train")) == RANKS, what="all ranks cached")
    hook.armed.set()
    fail_once.set()
    yield cache, hook
    hook.release.set()
    cache.stop()


def test_a_reader_during_a_paused_relist_sees_the_whole_gang(cache_with_pods, namespace, core):
    cache, hook = cache_with_pods
    # Any event on the open watch is followed by a 410 (as after an API-server restart): relist.
    core.patch_namespaced_pod("train-rank-0", namespace, {"metadata": {"annotations": {"poke": "1"}}})
    assert hook.paused.wait(60), "the forced relist never reached the refill"
    seen = sorted(p.name for p in cache.pods_for(namespace, "train"))  # mid-refill: half the pods parsed
    hook.release.set()
    assert seen == [f"train-rank-{i}" for i in range(RANKS)], "a reconcile now would restart a healthy gang"
    wait_until(lambda: hook.calls >= RANKS, what="relist finished")
    assert len(cache.pods_for(namespace, "train")) == RANKS
