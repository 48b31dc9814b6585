"""How a child is created or claimed, and how independent writes are sent together.

A user would notice: a child that another owner holds being used as theirs (never), a child that
vanished between the 409 and the read being remembered as made (their gang's pods Pending for
ever), or a write left half-done because its sibling failed (a Service without its ConfigMap).

pytest-asyncio is not installed: each test drives its own loop with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from dpjob_operator.controller.blocking import together
from dpjob_operator.controller.children import ChildGone, create_or_claim, read_and_claim
from tests.support.clocks import ManualSleep

pytestmark = pytest.mark.unit


class NotOurs(Exception):
    pass


def _claim(kind: str, meta: Mapping[str, Any]) -> None:
    if meta.get("uid") != "ours":
        raise NotOurs(f"{kind} {meta.get('name')}")


async def _value(value: Any) -> Any:
    return value


@pytest.mark.parametrize(("created", "there", "expect"), [
    (True, None, None),                                             # made now: no read at all
    (False, {"metadata": {"uid": "ours", "name": "a"}}, "ours"),     # an earlier pass made it
    (False, {"metadata": {"uid": "theirs", "name": "a"}}, NotOurs),  # someone else's: never used
    (False, None, ChildGone),                                        # taken, then collected
])
def test_create_or_claim(created: bool, there: dict[str, Any] | None, expect: Any) -> None:
    reads: list[int] = []

    async def read() -> dict[str, Any] | None:
        reads.append(1)
        return there

    async def run() -> dict[str, Any] | None:
        return await create_or_claim("Service", "a", lambda: _value(created), read, _claim)

    if isinstance(expect, type):
        with pytest.raises(expect):
            asyncio.run(run())
    else:
        got = asyncio.run(run())
        assert (got or {}).get("metadata", {}).get("uid") == expect
    assert reads == ([] if created else [1]), "read only after a 409"


@pytest.mark.parametrize(("there", "expect"), [
    (None, None),                                                   # absent: nothing to claim
    ({"metadata": {"uid": "ours", "name": "a"}}, "ours"),            # ours: returned as read
    ({"metadata": {"uid": "theirs", "name": "a"}}, NotOurs),         # someone else's: never used
])
def test_read_and_claim(there: dict[str, Any] | None, expect: Any) -> None:
    """What a memo's re-check reads (a rank-table ConfigMap someone may have changed)."""
    run = read_and_claim("ConfigMap", lambda: _value(there), _claim)
    if isinstance(expect, type):
        with pytest.raises(expect):
            asyncio.run(run)
    else:
        assert ((asyncio.run(run) or {}).get("metadata") or {}).get("uid") == expect


def test_together_lets_every_step_finish_and_raises_the_first_failure() -> None:
    finished: list[str] = []
    latency = ManualSleep()  # the API's answer to the two slow calls comes when the test says so

    async def step(name: str, slow: bool, fail: bool) -> None:
        if slow:
            await latency(0.01)
        finished.append(name)
        if fail:
            raise RuntimeError(name)

    async def run() -> None:
        calls = asyncio.create_task(together(step("service", True, False), step("table", False, True),
                                               step("gang", True, True)))
        async with asyncio.timeout(10):  # a guard against a hang; nothing here waits on time
            await latency.parked(2)  # the table failed; the other two are still in flight
        assert finished == ["table"]
        latency.release()
        await calls

    with pytest.raises(RuntimeError, match=r"^table$"):
        asyncio.run(run())
    assert sorted(finished) == ["gang", "service", "table"], "a failure must not cut its siblings off"


def test_together_costs_one_round_trip_not_one_each() -> None:
    latency = ManualSleep()

    async def run() -> int:
        in_flight = 0

        async def observe() -> None:
            nonlocal in_flight
            async with asyncio.timeout(10):  # a guard: calls sent one after another never get there
                await latency.parked(3)  # all three in flight at once: one round trip of latency, not three
            in_flight = latency.sleeping
            latency.release()

        await asyncio.gather(observe(), together(*(latency(0.1) for _ in range(3))))
        return in_flight

    assert asyncio.run(run()) == 3
