"""Root cause: which failed rank the job blames when several fail together.

When one rank dies, its peers' next collective fails within milliseconds and they exit too,
often *before* the kubelet reports the victim. Taking the lowest failed index (or the first
one seen) then blames a bystander, and under ``restartPolicy: ExitCode`` turns a retryable
kill into a "permanent" exit code 1. Like torchelastic's error files, we order by when each
rank's container terminated, and rank a trainer's "lost a peer" exit (``EXIT_PEER_LOST``, see
trainer-image/dpjob_trainer/peerloss.py) behind everything else. When every failure seen so
far is a lost peer while other ranks still run, the victim's failure is on its way: wait up to
``PEER_GRACE_SECONDS`` for it before deciding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.timestamps import parse_iso

EXIT_PEER_LOST = 75
PEER_GRACE_SECONDS = 15.0


def lost_peer(pod: PodObservation) -> bool:
    return pod.exit_code == EXIT_PEER_LOST


def _blame_order(pod: PodObservation) -> tuple[bool, str, bool, bool, int]:
    # Bystanders last; then the earliest termination; within the same second a disruption or
    # a signal (>= 128: OOM kill, SIGKILL) before a plain error exit; then the rank index.
    signalled = pod.exit_code is not None and pod.exit_code >= 128
    return (lost_peer(pod), pod.finished_at or "~", not pod.disrupted, not signalled, pod.index)


@dataclass(frozen=True)
class Blame:
    pod: PodObservation | None      # the root cause, or None while waiting for it
    wait_seconds: float = 0.0       # when pod is None: look again within this many seconds


def root_cause(failed: Sequence[PodObservation], current: Sequence[PodObservation], now: datetime) -> Blame:
    """The failed rank to blame, or a short wait while only bystanders have failed."""
    ordered = sorted(failed, key=_blame_order)
    first = ordered[0]
    if not lost_peer(first):
        return Blame(first)
    others_alive = any(p.phase == "Running" and not p.deleting and p not in failed for p in current)
    since = parse_iso(first.finished_at)
    if others_alive and since is not None:
        left = PEER_GRACE_SECONDS - (now - since).total_seconds()
        if left > 0:
            return Blame(None, left)
    return Blame(first)
