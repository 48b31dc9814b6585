"""What the executor tells the user once: the failures a pass reports, and the memo of what was said.

A refused pod or a taken name is written into the job's status and announced by one Event; the
next passes (the worker retries with backoff) fail the same way and must not repeat the Event.
``ReportedOnce`` remembers, per job, the last message reported; a success forgets it, so the
same failure later is reported anew.
"""

from __future__ import annotations

from dpjob_operator.reconcile.reasons import CREATED, FAILED_CREATE_POD


class ReportedFailure(RuntimeError):
    """An action the cluster refused. ``report`` is the message to put in the job's status (condition
    ``condition`` = False with ``reason``) when the user has not been told it yet; else None."""

    def __init__(self, text: str, report: str | None, reason: str, condition: str) -> None:
        super().__init__(text)
        self.report = report
        self.reason = reason
        self.condition = condition


class PodCreationFailed(ReportedFailure):
    """Some rank pods could not be created (quota, admission, an invalid template, a name taken)."""

    def __init__(self, failed: int, total: int, server_message: str, report: str | None,
                 reason: str = FAILED_CREATE_POD) -> None:
        super().__init__(f"{failed} rank pod creation(s) failed: {server_message}", report, reason, CREATED)


class ReportedOnce:
    def __init__(self) -> None:
        self._said: dict[str, str] = {}  # job uid -> the message last reported

    def first_time(self, job_uid: str, message: str) -> str | None:
        """``message`` if the job's user has not just been told it (and remember it), else None."""
        if self._said.get(job_uid) == message:
            return None
        self._said[job_uid] = message
        return message

    def clear(self, job_uid: str) -> None:
        self._said.pop(job_uid, None)
