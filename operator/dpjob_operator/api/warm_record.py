"""The trainer's record of its warm restarts in rank 0's termination message (pure).

Rank 0 of a gang restarted warm writes, when it ends cleanly (trainer ``warm.py``):
``dpjob-trainer: warm restarts N; rank R exit C at T[; stepped at S]``. The operator reads the
counts from rank 0's metrics every 10 s; this line books the restarts of a job that ended before
the next read (reconcile/warm_restarts.py).
"""

from __future__ import annotations

import re

from dpjob_operator.api.progress import ProgressReport

_RECORD = re.compile(r"dpjob-trainer: warm restarts (\d+); rank (\d+) exit (\d+) at ([0-9.]+)"
                     r"(?:; stepped at ([0-9.]+))?")


def report_from_record(message: str | None, restart: int, observed_at: float) -> ProgressReport | None:
    """The warm-restart fields of a progress report, from rank 0's termination message; None when
    the message holds no record."""
    found = _RECORD.search(message or "")
    if found is None:
        return None
    count, rank, code, failed, stepped = found.groups()
    return ProgressReport(restart=restart, observed_at=observed_at, step=0, last_step_time=observed_at,
                          first_step_time=float(stepped) if stepped else None, warm_restarts=int(count),
                          warm_rank=int(rank), warm_exit_code=int(code), warm_failed_time=float(failed))
