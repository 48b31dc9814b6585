"""The gang handshake at rank 0's store: every rank of one gang, and of only one gang, joins.

A gang is named by its generation (``DistEnv.generation``: the pod's generation, then the warm
restarts within it, warm.py). Rank 0 writes its generation to the store; every other rank writes
the generation it runs, and how its previous training process ended, then reads rank 0's:

- the same: it joins;
- older than its own: this is a rank 0 of the previous gang that has not noticed the failure yet (a
  warm restart is faster than failure detection); it waits for the new rank 0;
- newer: this process's gang is over (its peers' containers were restarted by the kubelet while it
  was restarted warm): ``GangMovedOn``, and its container restarts too.

Rank 0 reads every rank's generation the same way: a newer one ends rank 0's gang
(``GangMovedOn``); an older one is a rank about to learn the same and come back. So ranks that
restarted in different ways (one container restarted by the kubelet, the others warm) meet in the
newest gang instead of waiting for each other. Rank 0 also gathers the previous exits and names the
rank that failed first (``blame``), which it reports in its metrics for the operator's books.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from .peerloss import EXIT_PEER_LOST

GENERATION_KEY = "dpjob/generation"
#: How long rank 0 of a warm gang waits for every rank (the operator's own wait for a rank that does
#: not follow an in-place restart is the same).
FOLLOW_SECONDS = 30.0


class Store(Protocol):
    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def delete_key(self, key: str) -> bool: ...
    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


class GangMovedOn(RuntimeError):
    """This process's gang is older than one another rank runs: its container must restart."""


@dataclass(frozen=True)
class WarmCause:
    """The rank whose training process ended first, as the restarted gang learned it."""

    rank: int
    exit_code: int
    failed_at: float  # unix time the process ended


def order(generation: str) -> tuple[int, int]:
    pod, _, warm = generation.partition(".")
    return int(pod), int(warm or 0)


def _joined(rank: int) -> str:
    return f"dpjob/joined/{rank}"


def _previous(rank: int) -> str:
    return f"dpjob/previous/{rank}"


def join(store: Store, rank: int, generation: str, previous: str) -> bool:
    """A rank other than 0: True when it joined rank 0's gang, False when rank 0 is still the gang
    before (try again); ``GangMovedOn`` when rank 0 runs a newer gang."""
    store.set(_previous(rank), previous)
    store.set(_joined(rank), generation)
    seen = store.get(GENERATION_KEY).decode()
    if seen == generation:
        return True
    if order(seen) < order(generation):
        return False
    raise GangMovedOn(f"rank 0 runs gang {seen}, newer than this process's {generation}")


def gather(store: Store, world_size: int, generation: str, previous: str,
           follow_seconds: float | None = None, clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Rank 0: publish the gang, wait until every rank joined it; every rank's previous exit
    (``"<code> <unix time>"`` or ``""``), by rank. ``GangMovedOn`` when a rank runs a newer gang, or
    when ``follow_seconds`` pass before every rank joined (a warm gang: a rank whose old process does
    not notice the failure must not hold the others for ever; restarted by the kubelet, the gang
    meets again, and the operator recreates a rank that still does not follow)."""
    store.set(GENERATION_KEY, generation)
    exits = [previous]
    deadline = None if follow_seconds is None else clock() + follow_seconds
    for rank in range(1, world_size):
        if deadline is not None:
            try:
                store.wait([_joined(rank)], timedelta(seconds=max(deadline - clock(), 0.001)))
            except (RuntimeError, TimeoutError) as exc:
                raise GangMovedOn(f"rank {rank} did not join gang {generation} within {follow_seconds:g}s: "
                                  f"restarting this container") from exc
        while (seen := store.get(_joined(rank)).decode()) != generation:
            if order(seen) > order(generation):
                raise GangMovedOn(f"rank {rank} runs gang {seen}, newer than this process's {generation}")
            store.delete_key(_joined(rank))  # an older rank: it will learn and come back
        exits.append(store.get(_previous(rank)).decode())
    return exits


def _cause_class(code: int) -> int:
    return 1 if code == EXIT_PEER_LOST else 0  # a lost peer is a bystander


def blame(exits: Sequence[str]) -> WarmCause | None:
    """The rank to blame: a known exit before a lost peer, then the earliest, then the lowest rank."""
    causes = []
    for rank, text in enumerate(exits):
        code, _, ended = text.partition(" ")
        try:
            causes.append(WarmCause(rank, int(code), float(ended)))
        except ValueError:
            continue
    return min(causes, key=lambda c: (_cause_class(c.exit_code), c.failed_at, c.rank), default=None)
