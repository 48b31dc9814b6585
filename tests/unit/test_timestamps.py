"""Status timestamps: one format, UTC, and what the planner wrote reads back to the same instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from dpjob_operator.api.timestamps import iso, parse_iso

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("ts, text", [
    (datetime(2026, 11, 23, 9, 5, 7, tzinfo=UTC), "2026-11-23T09:05:07Z"),
    (datetime(2026, 11, 23, 10, 5, 7, 999_999, tzinfo=timezone(timedelta(hours=1))), "2026-11-23T09:05:07Z"),
], ids=["utc", "offset-and-microseconds"])
def test_iso_writes_utc_whole_seconds(ts: datetime, text: str) -> None:
    assert iso(ts) == text
    assert parse_iso(text) == ts.replace(microsecond=0)


@pytest.mark.parametrize("value", [None, ""])
def test_missing_timestamp_is_none(value: str | None) -> None:
    assert parse_iso(value) is None
