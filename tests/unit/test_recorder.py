"""The event recorder stamps each Event with the time it was recorded, on its clock, however late
the sender gets to it (the real API server's side: tests/integration/test_recorder.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from dpjob_operator.controller.recorder import EventRecorder
from dpjob_operator.reconcile.actions import Event
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.unit


class FakeKube:
    def __init__(self) -> None:
        self.posted: list[tuple[str, datetime]] = []

    def post_event(self, _about: Any, _type: str, reason: str, _message: str, at: datetime) -> None:
        self.posted.append((reason, at))


class InlineBlocking:
    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def test_events_carry_the_time_they_were_recorded_in_order():
    clock, kube = FakeClock(), FakeKube()
    job = {"metadata": {"name": "rec", "namespace": "ns", "uid": "u1"}}

    decided = clock.now()

    async def scenario() -> bool:
        recorder = EventRecorder(kube, InlineBlocking(), senders=1, capacity=3, clock=clock)
        recorder.record(job, [Event("Normal", "First", "first")])
        clock.advance(90)
        recorder.record(job, [Event("Normal", "Second", "second")])
        clock.advance(600)  # the sender gets to both much later
        recorder.start()
        try:
            return await recorder.flush(10)
        finally:
            recorder.stop()

    assert asyncio.run(scenario())
    assert kube.posted == [("First", decided), ("Second", decided + timedelta(seconds=90))]
