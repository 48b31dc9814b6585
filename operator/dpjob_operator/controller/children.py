"""Create a child, or claim the one already there: the one rule every child's creation follows.

A new job's children (Service, rank-table ConfigMaps, Workload, PodGroup) are POSTed straight
away, with no GET first: under load the round trips a pass waits on are its latency. A 409 means
the name is taken, and only then is the object read and claimed by controller UID
(``reconcile/claims.py``): ours (an earlier pass made it) is returned, anyone else's makes
``claim`` raise. Taken and then gone (a previous job's, collected between the 409 and the read)
raises too: remembering it as made would leave the job without it for good, e.g. a gang's pods
Pending for ever without their PodGroup (a job deleted and applied again at once).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Claim = Callable[[str, Mapping[str, Any]], None]  # (kind, metadata): returns if ours, else raises


class ChildGone(RuntimeError):
    """The name was taken at the POST and free at the read: create it again next pass (the worker's
    backoff retries; nothing to report)."""


async def read_and_claim(kind: str, read: Callable[[], Awaitable[dict[str, Any] | None]],
                         claim: Claim) -> dict[str, Any] | None:
    """The object if ``claim`` accepts it (ours), None if absent; anyone else's makes ``claim`` raise."""
    current = await read()
    if current is not None:
        claim(kind, current.get("metadata") or {})
    return current


async def create_or_claim(kind: str, name: str, create: Callable[[], Awaitable[bool]],
                          read: Callable[[], Awaitable[dict[str, Any] | None]],
                          claim: Claim) -> dict[str, Any] | None:
    """None when ``create`` made it (True); else the existing object, once ``claim`` has accepted it."""
    if await create():
        return None
    current = await read_and_claim(kind, read, claim)
    if current is None:
        raise ChildGone(f"{kind} {name} was deleted while being created")
    return current
