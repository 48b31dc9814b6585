"""The one timestamp format of job status and events: RFC 3339 in UTC, whole seconds, ``Z``.

Kubernetes writes its own times this way (``metav1.Time``), and the planner compares times it
wrote earlier with ``now``, so writing and parsing must use the same format.
"""

from __future__ import annotations

from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso(ts: datetime) -> str:
    """``ts`` as a status timestamp; aware times are converted to UTC first."""
    return ts.astimezone(UTC).strftime(FORMAT)


def parse_iso(value: str | None) -> datetime | None:
    """An aware UTC datetime from a status timestamp; None for a missing or empty value."""
    if not value:
        return None
    return datetime.strptime(value, FORMAT).replace(tzinfo=UTC)
