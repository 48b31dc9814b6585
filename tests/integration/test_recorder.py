"""The event recorder on the real API server: events go out behind the pass, in order, stamped
with the time they were decided, and a full buffer drops (and counts) rather than blocks."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dpjob_operator import metrics
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.recorder import EventRecorder
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.actions import Event
from tests.support import cluster as dpj
from tests.support.clocks import FakeClock

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


def _job(namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": "rec", "namespace": namespace, "uid": "0f0f0f0f-0000-4000-8000-000000000001",
                         "resourceVersion": "1"}}


def _dropped() -> float:
    """What /metrics says (the counter's sample, not its internals)."""
    return metrics.REGISTRY.get_sample_value("dpjob_events_dropped_total") or 0.0


def test_events_are_sent_in_order_with_the_time_they_were_recorded_and_overflow_is_dropped(api, namespace):
    loop = asyncio.new_event_loop()
    blocking = Blocking(loop, max_workers=2, concurrency=2)
    # Decided on a clock ten minutes behind: sent now, each event must still say when it was decided.
    clock = FakeClock(start=datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10))
    recorder = EventRecorder(KubeClient(api, qps=50, burst=100), blocking, senders=1, capacity=3, clock=clock)
    dropped = _dropped()
    try:
        job = _job(namespace)
        decided = clock.time()
        recorder.record(job, [Event("Normal", f"Step{i}", f"step {i}") for i in range(4)])  # no sender yet
        assert _dropped() == dropped + 1, "the 4th event overflows a buffer of 3"

        async def send() -> bool:
            recorder.start()
            return await recorder.flush(30)

        assert loop.run_until_complete(send())
        events = sorted(dpj.events(namespace, "rec"), key=lambda e: int(e["metadata"]["resourceVersion"]))
        assert [e["reason"] for e in events] == ["Step0", "Step1", "Step2"]
        stamped = {e["lastTimestamp"] for e in events}
        assert stamped == {time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(decided))}, (stamped, decided)
    finally:
        recorder.stop()
        loop.run_until_complete(asyncio.sleep(0))  # let the cancelled sender finish
        blocking.shutdown()
        loop.close()
