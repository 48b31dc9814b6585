"""Failure policy: what a failed or vanished rank means for the gang (one policy per file)."""

from __future__ import annotations

from dataclasses import dataclass

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import RunPolicy
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.rootcause import lost_peer


@dataclass(frozen=True)
class FailureDecision:
    restart: bool            # True: gang restart; False: the job fails
    counted: bool            # charged to runPolicy.backoffLimit
    reason: str              # CamelCase, used for status.restartsByReason, conditions and events
    message: str


def describe_failure(pod: PodObservation) -> str:
    code = "unknown exit code" if pod.exit_code is None else f"exit code {pod.exit_code}"
    why = f" ({pod.reason})" if pod.reason else ""
    where = f" on node {pod.node}" if pod.node else ""
    return f"rank {pod.index} (pod {pod.name}) failed with {code}{why}{where}"


def decide_failure(policy: RunPolicy, pod: PodObservation, failure_restarts: int) -> FailureDecision:
    """Decide between a gang restart and failing the job.

    - A disruption (eviction, preemption, node shutdown) is not the trainer's fault: always a
      restart, never charged to backoffLimit, so preemption does not look like a crash.
    - ``Never``: any failure fails the job.
    - ``ExitCode``: 1-127 are permanent (a bug or bad input), >= 128 (signals: OOM kill 137,
      SIGTERM 143) and unknown codes are retryable; so is a trainer's "lost a peer" exit (75),
      which only says that another rank died.
    - ``OnFailure``: every failure is retryable.
    A retryable failure fails the job once ``failure_restarts`` reached ``backoffLimit``.
    """
    what = describe_failure(pod)
    if pod.disrupted:
        # Deleted by someone (kubectl delete, a drain) or disrupted by the cluster (eviction,
        # preemption, node shutdown): not the trainer's fault, so never charged.
        reason = r.POD_DELETED if pod.reason == r.POD_DELETED else r.PREEMPTED
        return FailureDecision(True, False, reason, f"{what}: {'deleted' if reason == r.POD_DELETED else 'disrupted'}, "
                                                    f"restarting the gang")
    if policy.restart_policy == "Never":
        return FailureDecision(False, True, r.RANK_FAILED, f"{what}; restartPolicy is Never")
    if policy.restart_policy == "ExitCode" and pod.exit_code is not None and 0 < pod.exit_code < 128 \
            and not lost_peer(pod):
        return FailureDecision(False, True, r.PERMANENT_ERROR,
                               f"{what}; exit codes 1-127 are permanent under restartPolicy ExitCode")
    if failure_restarts >= policy.backoff_limit:
        return FailureDecision(False, True, r.BACKOFF_LIMIT_EXCEEDED,
                               f"{what}; backoffLimit {policy.backoff_limit} reached after "
                               f"{failure_restarts} gang restart(s)")
    return FailureDecision(True, True, r.RANK_FAILED,
                           f"{what}; restarting all ranks (failure restart {failure_restarts + 1} of "
                           f"backoffLimit {policy.backoff_limit})")
