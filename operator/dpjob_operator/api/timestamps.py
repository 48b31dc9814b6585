"""The timestamp formats the operator writes: RFC 3339 in UTC with ``Z``.

Job status and events use whole seconds (``metav1.Time``), and the planner compares times it
wrote earlier with ``now``, so writing and parsing must use the same format. A Lease's
``acquireTime``/``renewTime`` are ``metav1.MicroTime``: six fractional digits, which the API
server requires on write.
"""

from __future__ import annotations

from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MICRO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def iso(ts: datetime) -> str:
    """``ts`` as a status timestamp; aware times are converted to UTC first."""
    return ts.astimezone(UTC).strftime(FORMAT)


def parse_iso(value: str | None) -> datetime | None:
    """An aware UTC datetime from a status timestamp; None for a missing or empty value."""
    if not value:
        return None
    return datetime.strptime(value, FORMAT).replace(tzinfo=UTC)


def micro_iso(ts: datetime) -> str:
    """``ts`` as a MicroTime (``2026-11-24T03:00:00.000000Z``)."""
    return ts.astimezone(UTC).strftime(MICRO_FORMAT)


def parse_micro_iso(value: str | None) -> datetime | None:
    """An aware UTC datetime from a MicroTime; whole seconds are accepted too (another writer may
    have used them). None for a missing or empty value."""
    if not value:
        return None
    return datetime.strptime(value, MICRO_FORMAT if "." in value else FORMAT).replace(tzinfo=UTC)
