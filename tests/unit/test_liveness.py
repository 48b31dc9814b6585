"""Liveness fails when the operator cannot make progress: a silent pod watch or a wedged worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from dpjob_operator.controller.gang_verdicts import GangVerdicts
from dpjob_operator.controller.gangs import Gangs
from dpjob_operator.controller.workqueue import WorkQueue
from dpjob_operator.k8s.podcache import PodCache

pytestmark = pytest.mark.unit


def test_a_silent_pod_watch_is_stuck_a_recent_one_is_not():
    cache = PodCache(kube=Any, on_change=lambda ns, job, urgent: None)  # type: ignore[arg-type]
    assert cache.stuck(900) is None and cache.stuck() is None
    cache._reflector._heartbeat = time.monotonic() - 1000
    assert "the pods watch has been silent for 1000s" in (cache.stuck(900) or "")
    assert cache.stuck() is not None  # the default limit (900 s) is the one liveness uses


def test_a_silent_pod_group_watch_is_stuck_only_once_started():
    """The PodGroup watch runs only where the server serves PodGroups; unstarted, it is never stuck."""
    verdicts = GangVerdicts(kube=Any, on_change=lambda ns, job: None)  # type: ignore[arg-type]
    verdicts._reflector._heartbeat = time.monotonic() - 1000
    gangs = Gangs(kube=Any, blocking=Any, verdicts=verdicts)  # type: ignore[arg-type]
    assert gangs.stuck() is None
    gangs._watch = verdicts  # what detect() does once the server is known to serve PodGroups
    assert "the podgroups watch has been silent for 1000s" in (gangs.stuck() or "")


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
