"""A restart at N ranks on kwok nodes: only the operator's side, since kwok runs no containers.

kwok cannot restart a container, so the benchmark plays the kubelet's part of an in-place restart
(RestartAllContainers): it writes every rank pod's status (the status subresource) as a kubelet
does after restarting all of the pod's containers where they are: each container's
``restartCount`` + 1, the trainer running again with its ``lastState`` killed
(``RestartingAllContainers``), and the restart counter's init container ``dpjob-restart-count``
terminated with ``previous exit: 137`` on rank 1 (the rank that was killed) and
``previous exit: 75`` on the others (they lost a peer). For Recreate, rank 1 fails with exit 137
through kwok's own failure stage, as bench/gang_restart.py does. The clock stops when the job is
Running again with one restart counted.

kwok's pod stages leave the written status alone: its ``pod-ready`` stage matches only pods without
a ``podIP`` (the patch keeps it), and the failure stages need their label or annotations. The
status is written once the job is Running (kwok is done with its pods) and read back to be sure.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from bench.bench_operator import delete_job, job
from bench.compare import NO_TABLE_ABOVE
from bench.measure import RunMeter
from bench.restart_report import running_again
from dpjob_operator.api.restart_counter import COUNTER_CONTAINER, PREVIOUS_EXIT
from tests.support import cluster as dpj
from tests.support.kwok import fail_pod

KILLED_RANK = 1
KILLED, PEER_LOST = 137, 75
TRAINER = "trainer"


def in_place_status(status: Mapping[str, Any], previous_exit: int, now: str) -> dict[str, Any]:
    """The status patch a kubelet writes after restarting every container of a pod in place (pure):
    every container's ``restartCount`` + 1 and running since ``now``, the trainer's ``lastState``
    killed by the restart, and the counter's termination message naming ``previous_exit``."""
    containers = []
    for cs in status.get("containerStatuses") or []:
        new = {**copy.deepcopy(cs), "restartCount": int(cs.get("restartCount") or 0) + 1, "ready": True,
               "started": True, "state": {"running": {"startedAt": now}}}
        if cs.get("name") == TRAINER:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", now)
            new["lastState"] = {"terminated": {"exitCode": KILLED, "reason": "RestartingAllContainers",
                                               "startedAt": started, "finishedAt": now}}
        containers.append(new)
    inits = []
    for cs in status.get("initContainerStatuses") or []:
        new = copy.deepcopy(cs)
        if cs.get("name") == COUNTER_CONTAINER:
            new.update(restartCount=int(cs.get("restartCount") or 0) + 1, state={"terminated": {
                "exitCode": 0, "reason": "Completed", "message": f"{PREVIOUS_EXIT}{previous_exit}\n",
                "startedAt": now, "finishedAt": now}})
        inits.append(new)
    return {"status": {"containerStatuses": containers, "initContainerStatuses": inits}}


def _trainer_restarts(pod: Any) -> int:
    return next((cs.restart_count for cs in pod.status.container_statuses or [] if cs.name == TRAINER), 0)


def restart_in_place(core: client.CoreV1Api, ns: str, name: str) -> None:
    """Write every rank pod's status as after an in-place restart (32 at a time), then read it back."""
    pods = [p for p in dpj.rank_pods(core, ns, name) if not p.metadata.deletion_timestamp]
    before = {p.metadata.name: _trainer_restarts(p) for p in pods}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def write(pod: Any) -> None:
        status = core.api_client.sanitize_for_serialization(pod.status)
        code = KILLED if pod.metadata.labels[dpj.RANK_LABEL] == str(KILLED_RANK) else PEER_LOST
        _ = core.patch_namespaced_pod_status(pod.metadata.name, ns, in_place_status(status, code, now),
                                             _preload_content=False).data  # read: the connection is reused

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(write, pods))
    after = {p.metadata.name: _trainer_restarts(p) for p in dpj.rank_pods(core, ns, name)}
    lost = [pod for pod, count in before.items() if after.get(pod) != count + 1]
    if lost:
        raise RuntimeError(f"the in-place status did not stick on {len(lost)} pod(s) (kwok overwrote it?): "
                           f"{', '.join(sorted(lost)[:5])}")


def _job(name: str, ranks: int, strategy: str) -> dict[str, Any]:
    body: dict[str, Any] = job(name, ranks)
    body["spec"]["runPolicy"] = {"restartStrategy": strategy, "backoffLimit": 3}
    if ranks > NO_TABLE_ABOVE:  # the CRD refuses a generic table over 1 MiB
        body["spec"]["rankTable"] = {"format": "none"}
    return body


def run_kwok(strategy: str, ranks: int, rep: int, core: client.CoreV1Api, custom: client.CustomObjectsApi,
             meter: RunMeter, ns: str, timeout: float) -> dict[str, Any]:
    """One restart of a ``ranks``-rank job with ``strategy``: seconds until Running again, the operator's requests."""
    name = f"k{ranks}-{strategy.lower()}-{rep}"
    row: dict[str, Any] = {"mode": "kwok", "ranks": ranks, "strategy": strategy, "rep": rep}
    custom.create_namespaced_custom_object(dpj.GROUP, dpj.VERSION, ns, dpj.PLURAL, _job(name, ranks, strategy))
    try:
        st = dpj.wait_phase(core.api_client, ns, name, "Running", timeout=timeout)
        if st.get("restartStrategy") != strategy:
            raise RuntimeError(f"{name} runs with restartStrategy {st.get('restartStrategy')}, not {strategy}: "
                               "does the cluster serve RestartAllContainers?")
        end = meter.begin("dpjob")
        started = time.perf_counter()
        if strategy == "InPlace":
            restart_in_place(core, ns, name)
        else:
            fail_pod(core, ns, f"{name}-rank-{KILLED_RANK}", exit_code=KILLED)
        row["written_s"] = round(time.perf_counter() - started, 3)
        dpj.wait_status(core.api_client, ns, name, running_again, what="Running again after one restart",
                        timeout=timeout)
        row["running_s"] = round(time.perf_counter() - started, 3)
        row.update(end())
    finally:
        delete_job(custom, core, ns, name)
    return row
