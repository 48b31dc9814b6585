"""A job whose spec cannot be read: Failed/InvalidSpec, reported once per message.

The CRD's schema rejects most mistakes at admission; what it cannot know (an object stored before a
schema change) fails parsing here. The status says which field to fix (``reconcile/refusals.py``)
and one Event announces it; the same message is not written again on every resync, and a spec that
parses again (the user fixed it) is reported anew the next time it breaks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from dpjob_operator.api.spec import Job, SpecError, parse_job
from dpjob_operator.controller.recorder import EventRecorder
from dpjob_operator.reconcile.refusals import invalid_spec_status

JobKey = tuple[str, str]
WriteStatus = Callable[[JobKey, dict[str, Any], dict[str, Any]], Awaitable[None]]


class SpecErrors:
    def __init__(self, write_status: WriteStatus, recorder: EventRecorder) -> None:
        self._write_status, self._recorder = write_status, recorder
        self._reported: dict[JobKey, str] = {}  # the InvalidSpec message last reported

    async def parse(self, key: JobKey, body: dict[str, Any] | None) -> Job | None:
        """The job, or None: gone, or its spec is invalid (then reported, once per message)."""
        if body is None:
            return None
        try:
            job = parse_job(body)
        except SpecError as e:
            await self._report(key, body, str(e))
            return None
        self._reported.pop(key, None)  # valid (again): a later mistake is reported anew
        return job

    async def _report(self, key: JobKey, body: dict[str, Any], message: str) -> None:
        if self._reported.get(key) == message:
            return
        self._reported[key] = message
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        failed = invalid_spec_status(body.get("status") or {}, message, datetime.now(UTC), generation)
        await self._write_status(key, body, failed.status)
        self._recorder.record(body, failed.events)

    def forget(self, key: JobKey) -> None:
        self._reported.pop(key, None)
