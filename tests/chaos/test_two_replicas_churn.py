"""Chaos drill: two operator replicas side by side under churn, the leader SIGKILLed midway.

What a Deployment with ``replicas: 2`` and leader election must guarantee, checked from the API
server's own event streams (a watch on pods and on jobs for the whole drill):

* no duplicated pods: every (job, rank, gang generation) is created once, by one replica;
* no rolled-back status: a job's ``status.restarts`` never goes down and a finished job never
  comes back to life (a stale writer would do both);
* failover: the standby leads in under 15 s (the Lease's 10 s plus up to two retry periods) after the
  leader dies without releasing it, and the work goes on.

The drill runs ``DPJOB_CHURN_SECONDS`` (default 300; ``make test`` runs 60, ``make chaos`` 300):
jobs of 2 to 4 ranks are applied every two seconds, a third of them finish, a third fail once and
restart, a third run; older ones are deleted.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from kubernetes import client, watch

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.operator import LEASE_DURATION, OperatorProcess
from tests.support.paths import DEVCLUSTER, KUBECONFIG
from tests.support.waits import wait_until

pytestmark = pytest.mark.chaos

CHURN_SECONDS = float(os.environ.get("DPJOB_CHURN_SECONDS", "300"))
RETRY_PERIOD = 2


class Recorder:
    """Watches pods and jobs of one namespace for the whole drill and keeps what it needs."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.created: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # (owner uid, rank, restart) -> uids
        self.restarts: dict[str, list[int]] = defaultdict(list)               # job uid -> status.restarts seen
        self.phases: dict[str, list[str]] = defaultdict(list)
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []

    def _pods(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self.stop.is_set():
            try:
                for ev in watch.Watch().stream(core.list_namespaced_pod, self.namespace, timeout_seconds=5):
                    pod = ev["object"]
                    refs = pod.metadata.owner_references or []
                    labels = pod.metadata.labels or {}
                    if refs and "dpjob.io/rank" in labels:
                        key = (refs[0].uid, labels["dpjob.io/rank"], labels.get("dpjob.io/restart", "0"))
                        self.created[key].add(pod.metadata.uid)
            except Exception as e:  # noqa: BLE001 - recorded, the drill fails on it
                self.errors.append(e)
                time.sleep(0.5)

    def _jobs(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        while not self.stop.is_set():
            try:
                for ev in watch.Watch().stream(custom.list_namespaced_custom_object, "dpjob.io", "v1alpha1",
                                               self.namespace, "dataparalleljobs", timeout_seconds=5):
                    job: dict[str, Any] = ev["object"]
                    uid, st = job["metadata"]["uid"], job.get("status") or {}
                    if "restarts" in st:
                        self.restarts[uid].append(int(st["restarts"]))
                    if st.get("phase"):
                        self.phases[uid].append(st["phase"])
            except Exception as e:  # noqa: BLE001
                self.errors.append(e)
                time.sleep(0.5)

    def __enter__(self) -> Recorder:
        self._threads = [threading.Thread(target=fn, daemon=True, name=f"recorder{fn.__name__}")
                         for fn in (self._pods, self._jobs)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Stop recording, whatever the drill did: no watch thread outlives its test (each stream
        ends within its 5 s server-side timeout)."""
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


@pytest.fixture()
def two_replicas(operator) -> Iterator[list[OperatorProcess]]:
    operator.stop()  # the shared operator releases the Lease; the two replicas compete for it
    logs = DEVCLUSTER / "logs"
    a = OperatorProcess(KUBECONFIG, logs / "operator-replica-a.log")
    b = OperatorProcess(KUBECONFIG, logs / "operator-replica-b.log", wait_to_lead=False)
    a.start()
    b.start()
    yield [a, b]
    for op in (a, b):
        op.stop()


def _job(rng: random.Random, name: str) -> dict[str, Any]:
    builder = JobBuilder(name).replicas(rng.randint(2, 4)).run_policy(backoffLimit=2)
    kind = rng.choice(["finish", "fail", "run"])
    if kind == "finish":
        builder.completes_after("8s")
    elif kind == "fail":
        builder.fails_after("6s", exit_code=1)
    return builder.obj()


def test_two_replicas_under_churn_never_duplicate_or_roll_back(api, core, namespace, two_replicas):
    a, b = two_replicas
    assert a.leading() and not b.leading()
    with Recorder(api, namespace) as rec:
        rng = random.Random(7)
        live: list[str] = []
        started = time.monotonic()
        failover = None
        n = 0
        while time.monotonic() - started < CHURN_SECONDS:
            name = f"churn-{n}"
            n += 1
            dpj.create(api, namespace, _job(rng, name))
            live.append(name)
            if len(live) > 12 and rng.random() < 0.6:
                dpj.delete(api, namespace, live.pop(rng.randrange(len(live) - 4)))
            if failover is None and time.monotonic() - started > CHURN_SECONDS / 2:
                leader = a if a.leading() else b
                standby = b if leader is a else a
                assert leader.proc is not None
                leader.proc.send_signal(signal.SIGKILL)  # no Lease release: the standby must wait it out
                killed = time.monotonic()
                wait_until(standby.leading, timeout=LEASE_DURATION + 3 * RETRY_PERIOD, interval=0.2,
                           what="the standby to take over")
                failover = time.monotonic() - killed
            time.sleep(2)

        # The survivor finishes the work: every job still there reaches a verdict or runs.
        for name in live:
            dpj.wait_status(api, namespace, name, lambda s: s.get("phase") in ("Running", "Succeeded", "Failed"),
                            timeout=120, what=f"{name} settled")
        # One more pass of every job by the survivor: a duplicate or a rollback it was about to write is seen.
        survivor = a if a.leading() else b
        survivor.wait_passes(len(live), survivor.passes(), timeout=60, what="the survivor's look at every job")
    duplicated = {k: v for k, v in rec.created.items() if len(v) > 1}
    rolled_back = {uid: seq for uid, seq in rec.restarts.items() if any(x > y for x, y in pairwise(seq))}
    revived = {uid: seq for uid, seq in rec.phases.items()
               if any(p in ("Succeeded", "Failed") and q not in ("Succeeded", "Failed") for p, q in pairwise(seq))}
    print(f"{n} jobs in {CHURN_SECONDS:.0f}s, {len(rec.created)} rank pods, failover {failover:.1f}s")
    assert not rec.errors or len(rec.errors) < 5, rec.errors[:3]
    assert failover is not None and failover < 15, f"failover took {failover:.1f}s"
    assert not duplicated, f"pods created twice for one rank of one generation: {list(duplicated)[:5]}"
    assert not rolled_back, f"status.restarts went down: {rolled_back}"
    assert not revived, f"a finished job came back: {revived}"
    assert len(rec.created) > n  # the drill did create pods (every job at least two)
