"""Which pod changes are reconciled at once, which wait for the batch, and which cost no pass.

A user would notice: a failed rank whose gang restart waits (it must not), a deleted pod that a
restart waits for being noticed late (it must not), or one status write per pod of every gang
(the batch exists to stop that: under 200 jobs those writes slowed every other job's pass).
"""

from __future__ import annotations

import dataclasses

import pytest

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.pod_changes import PodChange, classify

pytestmark = pytest.mark.unit

PENDING = PodObservation(name="j-rank-0", uid="u1", index=0, restart=0, phase="Pending")
SCHEDULED = dataclasses.replace(PENDING, node="node-a")
RUNNING = dataclasses.replace(SCHEDULED, phase="Running", pod_ip="10.0.0.1")
READY = dataclasses.replace(RUNNING, ready=True)


@pytest.mark.parametrize(("before", "after", "expect"), [
    (None, PENDING, PodChange.PROGRESS),                                   # created
    (PENDING, SCHEDULED, PodChange.PROGRESS),                              # bound to a node
    (SCHEDULED, RUNNING, PodChange.PROGRESS),
    (RUNNING, READY, PodChange.PROGRESS),
    (READY, READY, PodChange.NONE),                                        # a status patch we do not read
    (None, None, PodChange.NONE),                                          # a pod we never held went away
    (READY, None, PodChange.URGENT),                                       # deleted: a restart may wait on it
    (READY, dataclasses.replace(READY, deleting=True), PodChange.URGENT),
    (READY, dataclasses.replace(READY, phase="Failed", exit_code=137, ready=False), PodChange.URGENT),
    (READY, dataclasses.replace(READY, phase="Succeeded", exit_code=0, ready=False), PodChange.URGENT),
    (READY, dataclasses.replace(READY, exit_code=1), PodChange.URGENT),      # the trainer exited, pod not yet Failed
    (READY, dataclasses.replace(READY, disrupted=True), PodChange.URGENT),   # evicted, preempted
    (READY, RUNNING, PodChange.URGENT),                                    # a running rank lost its readiness
    (READY, dataclasses.replace(PENDING, uid="u2"), PodChange.URGENT),       # the name holds another pod now
    (None, dataclasses.replace(PENDING, phase="Failed"), PodChange.URGENT),  # first seen already failed
])
def test_classify(before: PodObservation | None, after: PodObservation | None, expect: PodChange) -> None:
    assert classify(before, after) is expect
