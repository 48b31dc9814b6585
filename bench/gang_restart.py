"""A gang restart at N ranks (issue 13): from one rank Failed to a whole new gang Running.

dpjob restarts the whole gang when a rank fails (restartPolicy OnFailure, within backoffLimit):
every rank pod is deleted and recreated with the next restart generation, because the survivors of
a broken collective can only hang. The clock starts when rank 0 is made to fail (kwok's
``pod-container-running-failed`` stage, exit code 137 after 100 ms) and stops when N pods that did
not exist before are Running.

The floor: the same N pods replaced by a parallel client (one delete-collection, then N creates
from 32 threads under new names, so it never waits for the old pods to go). Kubeflow's PyTorchJob
has no gang restart to compare: v1 recreates only the failed pod (restartPolicy OnFailure/ExitCode),
so it is reported as not comparable rather than timed doing less work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from bench.measure import PodClock, RunMeter
from tests.support.kwok import fail_pod


def _uids(core: client.CoreV1Api, ns: str) -> frozenset[str]:
    return frozenset(p.metadata.uid for p in core.list_namespaced_pod(ns).items)


def _fail_rank_zero(core: client.CoreV1Api, ns: str) -> None:
    name = next(p.metadata.name for p in core.list_namespaced_pod(ns).items if p.metadata.name.endswith("-rank-0"))
    fail_pod(core, ns, name, exit_code=137)


def _replace_raw(core: client.CoreV1Api, ns: str, n: int, raw_pod: Callable[[str, int], dict[str, Any]]) -> None:
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)

    def create(i: int) -> None:
        body = raw_pod(ns, i)
        body["metadata"]["name"] = f"raw-r1-{i}"
        _ = core.create_namespaced_pod(ns, body, _preload_content=False).data  # read: the connection is reused

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(create, range(n)))


def run_restart(engine: str, n: int, core: client.CoreV1Api, submit: Callable[[str, int], None],
                meter: RunMeter, timeout: float, ns: str,
                raw_pod: Callable[[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Start a gang of ``n`` with ``submit``, wait until it runs, then time its replacement."""
    row: dict[str, Any] = {"scenario": f"gang restart x {n}", "engine": engine, "ranks": n}
    first = PodClock(core, ns, n)
    first.start()
    submit(ns, n)
    if first.wait(timeout)[1] is None:
        return {**row, "created_s": None, "running_s": None}
    time.sleep(1)  # let the operator see the gang Running (its status) before a rank fails
    end = meter.begin(engine)
    clock = PodClock(core, ns, n, ignore=_uids(core, ns))
    clock.start()
    if engine == "raw":
        _replace_raw(core, ns, n, raw_pod)
    else:
        _fail_rank_zero(core, ns)
    created, running = clock.wait(timeout)
    return {**row, "created_s": created, "running_s": running, **end()}
