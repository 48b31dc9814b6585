"""What a rank pod restarted in place died of, kept across the kubelet's status updates (pure).

Between the trainer's exit and its removal the kubelet reports the real termination (exit code,
reason, the termination message with a traceback's tail); once it restarts every container in
place it reports them all as killed (137, ``RestartingAllContainers``) instead. The pod cache keeps
the real one: when an update says ``RestartingAllContainers`` and the previous observation of the
same pod, one restart earlier or carried already, knew better, the new observation keeps that.
"""

from __future__ import annotations

from dataclasses import replace

from dpjob_operator.api.observed import PodObservation

RESTARTING_ALL = "RestartingAllContainers"


def carry_cause(before: PodObservation | None, after: PodObservation) -> PodObservation:
    """``after``, with ``before``'s termination when the kubelet's restart in place replaced it."""
    if before is None or before.uid != after.uid or after.reason != RESTARTING_ALL:
        return after
    if before.reason in (None, RESTARTING_ALL) or before.exit_code is None:
        return after
    if after.in_place - before.in_place not in (0, 1):
        return after
    return replace(after, exit_code=before.exit_code, reason=before.reason, message=before.message,
                   finished_at=before.finished_at, container=before.container)
