"""Liveness fails when the operator cannot make progress: a silent pod watch or a wedged worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from dpjob_operator.controller.workqueue import WorkQueue
from dpjob_operator.k8s.podcache import PodCache

pytestmark = pytest.mark.unit


def test_a_silent_pod_watch_is_stuck_a_recent_one_is_not():
    cache = PodCache(kube=Any, on_change=lambda ns, job, urgent: None)  # type: ignore[arg-type]
    assert cache.stuck(900) is None
    cache._heartbeat = time.monotonic() - 1000
    assert "silent for 1000s" in (cache.stuck(900) or "")


def test_a_key_held_too_long_is_stuck_until_done():
    async def scenario() -> tuple[str | None, str | None, str | None]:
        queue: WorkQueue[tuple[str, str]] = WorkQueue(name="test-liveness")
        queue.add(("ns", "job"))
        key = await queue.get()
        fresh = queue.stuck(600)
        queue._since[key] -= 700
        held = queue.stuck(600)
        queue.done(key)
        return fresh, held, queue.stuck(600)

    fresh, held, released = asyncio.run(scenario())
    assert fresh is None and released is None
    assert held is not None and "('ns', 'job')" in held and "70" in held
