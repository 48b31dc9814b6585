"""What ``dpjob logs`` asks of each rank's log: ``--tail``, ``--since``, ``--previous``, ``--timestamps``.

Pure: the flags' values in, the keyword arguments of the API's pod-log read out (``tail_lines``,
``since_seconds``, ``previous``, ``timestamps`` of ``read_namespaced_pod_log``), so the mapping is
tested without a cluster. The flags mean what kubectl's do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import click

DURATION_FORM = "a duration like 5s, 2m, 1h or 1h30m (whole hours, minutes and seconds, in that order)"
_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# kubectl refuses the pair the same way: a previous instance has ended, so there is nothing to follow.
PREVIOUS_WITH_FOLLOW = ("--previous and --follow exclude each other: the previous trainer instance has ended, "
                        "there is nothing to follow (drop -f to print it, or -p to follow the current one)")


def parse_duration(text: str) -> int:
    """Seconds in ``text`` (``5s``, ``2m``, ``1h``, ``1h30m``); ``ValueError`` naming the accepted form."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise ValueError(f"expected {DURATION_FORM}, got {text!r}")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError(f"expected {DURATION_FORM} of at least 1s, got {text!r}")
    return total


def duration_seconds(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> int | None:
    """The click callback of ``--since``: whole seconds, or None when not given; a bad value is a
    ``BadParameter`` (exit 2, naming the flag and the accepted form)."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@dataclass(frozen=True)
class LogOptions:
    """Which part of each rank's trainer log to read, and how."""

    tail: int | None = None  # the last N lines (None: all)
    since_seconds: int | None = None  # only lines newer than this many seconds (None: all)
    previous: bool = False  # the trainer's previous instance in the same pod (after an in-place restart)
    timestamps: bool = False  # each line starts with its RFC 3339 time, as the kubelet recorded it

    def api_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``read_namespaced_pod_log`` these options ask for (none when all are off)."""
        wanted: dict[str, Any] = {"tail_lines": self.tail, "since_seconds": self.since_seconds,
                                  "previous": self.previous or None, "timestamps": self.timestamps or None}
        return {key: value for key, value in wanted.items() if value is not None}

    def for_later_container(self) -> LogOptions:
        """How a follower reads a container that starts after following began: from its first line
        (``tail`` and ``since`` are about what was logged before), with timestamps if asked."""
        return LogOptions(timestamps=self.timestamps)


WHOLE_LOG = LogOptions()  # the current instance's whole log, as the kubelet has it


def conflict(options: LogOptions, follow: bool) -> str | None:
    """Why these options cannot be used together, or None."""
    return PREVIOUS_WITH_FOLLOW if options.previous and follow else None
