"""The executor's memos and its expectations run on one injected clock: a Service someone deleted
comes back once the memo expires (and costs no call before), and an awaited pod creation is
forgotten after the expectation timeout, both on a clock the test moves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.executor import Executor
from dpjob_operator.controller.expectations import EXPECTATION_TIMEOUT
from dpjob_operator.controller.timings import Timings
from dpjob_operator.reconcile.actions import EnsureService, Plan
from tests.support.builders import JobBuilder
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.unit


class FakeKube:
    """Objects by (kind, name); counts the creates the executor sends."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.creates = 0

    def create_if_absent(self, obj: Mapping[str, Any]) -> bool:
        self.creates += 1
        key = (obj["kind"], obj["metadata"]["name"])
        if key in self.stored:
            return False
        self.stored[key] = obj
        return True

    def read_raw(self, kind: str, _namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.stored.get((kind, name))


class InlineBlocking:
    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def executor(clock: FakeClock) -> tuple[Executor, FakeKube]:
    kube = FakeKube()
    return Executor(OperatorConfig(), kube, InlineBlocking(), None, Timings(), clock=clock), kube


def test_a_deleted_service_comes_back_once_the_memo_expires_and_not_before():
    clock, job = FakeClock(), JobBuilder().job()
    ex, kube = executor(clock)
    plan = Plan({}, [EnsureService()])
    asyncio.run(ex.execute(job, plan))
    kube.stored.clear()  # someone deletes the Service
    clock.advance(ex.memo_seconds)
    asyncio.run(ex.execute(job, plan))
    assert (kube.creates, kube.stored) == (1, {}), "a steady job's resync costs no call while the memo holds"
    clock.advance(1)
    asyncio.run(ex.execute(job, plan))
    assert kube.creates == 2 and ("Service", job.name) in kube.stored


def test_an_awaited_creation_is_forgotten_after_the_expectation_timeout_on_the_same_clock():
    clock, job = FakeClock(), JobBuilder().job()
    ex, _ = executor(clock)
    ex.expectations.created(job.uid, 0, [f"{job.name}-rank-0"])
    asyncio.run(ex.execute(job, Plan({}, [])))
    assert ex.expectations.awaited_creations(job.uid, 0) == {f"{job.name}-rank-0"}
    clock.advance(EXPECTATION_TIMEOUT + 1)
    asyncio.run(ex.execute(job, Plan({}, [])))
    assert ex.expectations.awaited_creations(job.uid, 0) == set()
