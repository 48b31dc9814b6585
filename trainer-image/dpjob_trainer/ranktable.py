"""Waiting for the operator's rank table before joining the process group.

The operator mounts the rank table (a ConfigMap) at ``RANK_TABLE_FILE`` as soon as the pod
exists, but fills it only when every rank pod has an IP (design section 6); until then it reads
``{"status": "initializing"}``. HCCL reads the file during communicator init, so initialising
early would build a communicator from a half-written table. Hence: poll until ``status`` is
``completed``, with a deadline and an error that says which file and what it last said.

Pure of torch, and clock/sleep are injectable so tests run in milliseconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

# The ``status`` of a usable table. The operator's image writes it (builders.ranktable
# STATUS_COMPLETED); this image is built separately, so it keeps its own copy and a unit test
# (tests/unit/test_ranktable_contract.py) holds the two equal.
STATUS_COMPLETED = "completed"

# Backends that read the rank table when they build their communicator. torch over gloo or nccl
# rendezvous at MASTER_ADDR and never read it; for them the table is information only.
BACKENDS_READING_THE_TABLE = frozenset({"hccl"})


def must_wait_for_rank_table(requested_backend: str | None, policy: str = "auto") -> bool:
    """Whether to block on ``RANK_TABLE_FILE`` before joining the process group.

    A kubelet refreshes a mounted ConfigMap only on its periodic pod sync (about a minute), so a
    wait that no backend needs delays every start and every gang restart by that much: seen on
    the dev cluster's real node, where it cost 65 s per start. ``policy``: ``auto`` waits only for
    backends that read the table, ``always`` and ``never`` override it (a user's own script that
    reads the table can ask for ``always``).
    """
    if policy not in ("auto", "always", "never"):
        raise ValueError(f"rank table wait policy must be auto, always or never, got {policy!r}")
    if policy != "auto":
        return policy == "always"
    return requested_backend in BACKENDS_READING_THE_TABLE


class RankTableTimeout(TimeoutError):
    """The rank table never reached ``status: completed`` before the deadline."""


def read_rank_table_status(path: str) -> tuple[str, dict[str, Any] | None]:
    """Return (status as shown to the user, parsed table or None).

    A missing or half-written file is a normal transient state (the ConfigMap volume is
    updated asynchronously by the kubelet), so it is reported, not raised.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return "<file missing>", None
    except OSError as exc:
        return f"<unreadable: {exc.strerror or exc}>", None
    try:
        table = json.loads(text)
    except json.JSONDecodeError:
        return "<not valid JSON yet>", None
    if not isinstance(table, dict):
        return "<not a JSON object>", None
    status = table.get("status")
    return (str(status) if status is not None else "<no status field>"), table


def wait_for_rank_table(
    path: str,
    timeout: float = 600.0,
    poll: float = 1.0,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    waiting: Callable[[str | None], None] = lambda _status: None,
) -> dict[str, Any]:
    """Block until the JSON at ``path`` has ``status == "completed"``; return the table.

    ``waiting`` is told the status once, when the first read finds the table not completed (the
    trainer logs it: a rank that waits says why). Raises RankTableTimeout naming the file and the
    last status seen once ``timeout`` seconds have passed. A timeout of 0 checks exactly once.
    """
    deadline = clock() + timeout
    told = False
    while True:
        status, table = read_rank_table_status(path)
        if table is not None and status == STATUS_COMPLETED:
            return table
        if not told:
            waiting(status)
            told = True
        remaining = deadline - clock()
        if remaining <= 0:
            raise RankTableTimeout(
                f"rank table {path} did not reach status 'completed' within {timeout:g}s "
                f"(last status seen: {status!r}); check that every rank pod got an IP, or raise --rank-table-timeout"
            )
        sleep(min(poll, remaining))
