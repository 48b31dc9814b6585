"""Chaos drill: kube-apiserver restarted 5 times (twice in ``make test``) while 20 jobs run. Nothing may restart.

Every restart breaks the operator's job and pod watches (each relists) and its
Lease renewals; an API-server upgrade or crash does the same in a real cluster. An outage longer
than the renew deadline makes the leader exit (as client-go's leader election does) and the drill
starts it again as its Deployment would: a fresh process with an empty cache must not restart
anything either. A relist that
shows a gang half-loaded, or a Lease renewal that gives up too early, would restart healthy
gangs (uncharged, so nothing else would notice): here every job must keep its pods.
"""

from __future__ import annotations

import os

import pytest

from devcluster import cluster as devcluster
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.waits import wait_until

pytestmark = pytest.mark.chaos

# ``make test`` restarts the API server twice (DPJOB_APISERVER_RESTARTS), ``make chaos`` 5.
JOBS, RANKS, RESTARTS = 20, 4, int(os.environ.get("DPJOB_APISERVER_RESTARTS", "5"))


def _snapshot(api, core, namespace: str) -> dict[str, tuple[str, int, tuple[str, ...]]]:
    """job -> (phase, restarts, rank pod uids)."""
    out = {}
    for i in range(JOBS):
        name = f"job-{i}"
        st = dpj.status(api, namespace, name)
        uids = tuple(sorted(p.metadata.uid for p in dpj.rank_pods(core, namespace, name)))
        out[name] = (st.get("phase"), int(st.get("restarts", 0)), uids)
    return out


def test_apiserver_restarts_leave_every_running_gang_alone(api, core, namespace, operator):
    for i in range(JOBS):
        dpj.create(api, namespace, JobBuilder(f"job-{i}").replicas(RANKS).obj())
    for i in range(JOBS):
        dpj.wait_phase(api, namespace, f"job-{i}", "Running", timeout=180)
    before = _snapshot(api, core, namespace)
    assert all(phase == "Running" and len(uids) == RANKS for phase, _, uids in before.values())
    log_start = operator.log_path.stat().st_size

    outages, exits_before = [], len(operator.exits)
    for _ in range(RESTARTS):
        outages.append(devcluster.restart("kube-apiserver"))
        # A leader that cannot renew its Lease for the renew deadline stops and exits, as client-go's
        # leader election does; the shared operator is started again as its pod would be.
        # Every watch noticed, failed and relisted, and each job had a pass on the fresh view,
        # before the next blow.
        operator.wait_passes(JOBS, operator.passes(), timeout=120, what="every job after an API-server restart")
    operator_restarts = len(operator.exits) - exits_before
    # Three passes of every job: time to act on a wrong view, measured by the operator's own count.
    operator.wait_passes(3 * JOBS, operator.passes(), timeout=120, what="three of every job after the drill")

    after = wait_until(lambda: _snapshot(api, core, namespace), timeout=60, what="jobs readable again")
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    log = operator.log_path.read_text(errors="replace")[log_start:]
    assert operator_restarts or "pod watch" in log, "the drill broke neither the pod watch nor the Lease"
    print(f"apiserver outages (s): {[round(o, 1) for o in outages]}; operator restarts: {operator_restarts}")
