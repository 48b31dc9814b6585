"""When a pass asks whether the job's namespace is being deleted: only when a running gang lost a
rank (the one moment a namespace deletion would be read as a rank deleted, and the gang restarted)."""

from __future__ import annotations

import pytest

from dpjob_operator.controller.observer import lost_a_rank
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
JOB = JobBuilder().replicas(3).job()


@pytest.mark.parametrize(("phase", "pods", "lost"), [
    ("Running", [pod(0), pod(1), pod(2)], False),
    ("Running", [pod(0), pod(1, deleting=True), pod(2)], True),
    ("Running", [pod(0), pod(2)], True),
    # the previous gang's pods going (a restart we made) are not a loss of the current gang
    ("Running", [pod(0, restart=1), pod(1, restart=1), pod(2, restart=1), pod(1, deleting=True)], False),
    # another job's pod of the same name is not ours
    ("Running", [pod(0), pod(1), pod(2, owner_uid="someone-else")], True),
    ("Pending", [pod(0)], False),
    ("Restarting", [pod(0, deleting=True)], False),
    ("Succeeded", [], False),
], ids=["whole", "one-deleting", "one-gone", "old-gang-going", "foreign-pod", "pending", "restarting",
        "finished"])
def test_only_a_running_gang_that_lost_a_rank_reads_the_namespace(phase, pods, lost):
    gen = max((p.restart for p in pods), default=0)
    assert lost_a_rank(JOB, gen, pods, phase) is lost
