"""The progress-reporting contract: the metric names a trainer serves, and one report read from it.

The operator learns a job's progress by reading rank 0's Prometheus endpoint (the trainer
container's ``metrics`` port, exported to the pod as ``DPJOB_METRICS_PORT``): one HTTP GET per job
every ``PROGRESS_SECONDS``, however many ranks, and no RBAC or token in any pod. Ranks step in
lockstep under DDP, so rank 0 speaks for the gang. Only ``dpjob_trainer_step`` is required; every
other series adds a field to ``status.progress``. docs/api.md ("Progress reporting") is the
contract users implement; the built-in trainer serves all of it.

This module is pure: the controller parses the text (prometheus-client, I/O layer) into plain
``{sample name: value}`` and calls ``report_from_samples``; the planner turns reports into status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

#: How often rank 0 is read, and the least time between two progress-only status writes of a job.
PROGRESS_SECONDS = 10.0

STEP = "dpjob_trainer_step"                                  # required: the global step (resumes included)
TOTAL_STEPS = "dpjob_trainer_total_steps"                    # -> percent, ETA
LAST_STEP_TIME = "dpjob_trainer_last_step_timestamp_seconds"  # unix time of the last step
LOSS = "dpjob_trainer_loss"
EPOCH = "dpjob_trainer_epoch"
GLOBAL_SAMPLES = "dpjob_trainer_global_samples_total"        # -> samplesPerSecond
CHECKPOINT_STEP = "dpjob_trainer_checkpoint_step"
CHECKPOINT_TIME = "dpjob_trainer_checkpoint_timestamp_seconds"
INFO = "dpjob_trainer_info"                                  # labels job_name, restart: who is speaking
STRAGGLER_RANK = "dpjob_trainer_straggler_rank"              # -> slowestRank (-1: none)
SLOWEST_RATIO = "dpjob_trainer_slowest_rank_ratio"           # the slowest rank's own step time / median
FIRST_STEP = "dpjob_trainer_first_step"                      # this process's first step (a resume's) -> goodput
FIRST_STEP_TIME = "dpjob_trainer_first_step_timestamp_seconds"
# Warm restarts (the trainer's supervisor replaced the training processes inside their containers):
# how many in rank 0's container in this gang generation, and who failed first before the last one.
WARM_RESTARTS = "dpjob_trainer_warm_restarts"
WARM_RANK = "dpjob_trainer_warm_restart_rank"
WARM_EXIT_CODE = "dpjob_trainer_warm_restart_exit_code"
WARM_FAILED_TIME = "dpjob_trainer_warm_restart_failed_timestamp_seconds"
CONTRACT = (STEP, TOTAL_STEPS, LAST_STEP_TIME, LOSS, EPOCH, GLOBAL_SAMPLES, CHECKPOINT_STEP, CHECKPOINT_TIME, INFO,
            STRAGGLER_RANK, SLOWEST_RATIO, FIRST_STEP, FIRST_STEP_TIME, WARM_RESTARTS, WARM_RANK, WARM_EXIT_CODE,
            WARM_FAILED_TIME)
PREFIX = "dpjob_trainer_"


@dataclass(frozen=True)
class ProgressReport:
    """What rank 0 of gang generation ``restart`` said at ``observed_at`` (unix times on the operator's clock)."""

    restart: int
    observed_at: float
    step: int
    last_step_time: float
    total_steps: int | None = None
    loss: float | None = None
    epoch: int | None = None
    global_samples: float | None = None
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None
    straggler_rank: int | None = None   # a rank consistently slower than the others (trainer's verdict)
    slowest_ratio: float | None = None  # the slowest rank's own step time over the median
    first_step: int | None = None       # the first step of the process that reported (a resume's first)
    first_step_time: float | None = None
    warm_restarts: int | None = None    # warm restarts in this gang generation (reconcile/warm_restarts.py)
    warm_rank: int | None = None        # the rank that failed first before the last of them
    warm_exit_code: int | None = None
    warm_failed_time: float | None = None


@dataclass(frozen=True)
class ProgressView:
    """What the operator knows of one gang's progress: the latest report, the report before the step
    last moved (the rate's base), and since when this operator process has been reading rank 0 of
    gang ``restart``, so that a stall is only ever declared after watching for the whole timeout
    (an operator restart must not turn a status written minutes ago into a false stall)."""

    restart: int
    watching_since: float
    latest: ProgressReport | None = None
    base: ProgressReport | None = None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _timestamp(value: float | None) -> float | None:
    """A plausible unix time (seconds, after 1970 and before the year 5000), else None: a script
    that reports milliseconds must not break the status write."""
    value = _finite(value)
    return value if value is not None and 0 < value < 1e11 else None


def _count(value: float | None) -> int | None:
    value = _finite(value)
    return int(value) if value is not None and value >= 0 else None


def step_time(reported: float | None, observed_at: float, since: float | None) -> float:
    """When a newly seen step happened, on the operator's clock.

    The trainer's timestamp is exact when the clocks agree, but a node whose clock runs a minute
    behind would make every step look a minute old (a false stall). The step happened after the
    previous read that did not see it (``since``) and before this read, so the trainer's time is
    clamped into that window: exact with synced clocks, off by at most one read period without.
    """
    value = _timestamp(reported)
    if value is None:
        return observed_at
    if since is not None:
        value = max(value, since)
    return min(value, observed_at)


def report_from_samples(values: Mapping[str, float], restart: int, observed_at: float,
                        since: float | None = None) -> ProgressReport | None:
    """A report from the scraped samples; None until the trainer has completed a step.

    ``since``: when this endpoint was last read without showing the current step (see ``step_time``).
    """
    step = _count(values.get(STEP))
    if not step:
        return None  # no step yet: the stall clock must not start before the first one
    total = _count(values.get(TOTAL_STEPS))
    return ProgressReport(
        restart=restart,
        observed_at=observed_at,
        step=step,
        last_step_time=step_time(values.get(LAST_STEP_TIME), observed_at, since),
        total_steps=total or None,
        loss=_finite(values.get(LOSS)),
        epoch=_count(values.get(EPOCH)),
        global_samples=_finite(values.get(GLOBAL_SAMPLES)),
        checkpoint_step=_count(values.get(CHECKPOINT_STEP)),
        checkpoint_time=_timestamp(values.get(CHECKPOINT_TIME)),
        straggler_rank=_count(values.get(STRAGGLER_RANK)),  # -1 (none) is not a count: None
        slowest_ratio=_finite(values.get(SLOWEST_RATIO)),
        first_step=_count(values.get(FIRST_STEP)),
        first_step_time=_timestamp(values.get(FIRST_STEP_TIME)),
        warm_restarts=_count(values.get(WARM_RESTARTS)),
        warm_rank=_count(values.get(WARM_RANK)),
        warm_exit_code=_count(values.get(WARM_EXIT_CODE)),
        warm_failed_time=_timestamp(values.get(WARM_FAILED_TIME)),
    )


def refusal(info: Mapping[str, str], job_name: str, restart: int) -> str | None:
    """Why a report must not reach status (it speaks for another job or gang), or None.

    The labels are optional (a user's script may not serve ``dpjob_trainer_info``); when present
    they must match the pod that was read: an address reused by another job's pod, or a process
    left over from an older gang, is refused.
    """
    named = info.get("job_name")
    if named and named != job_name:
        return f"{INFO} names job {named!r}, not {job_name!r}"
    gen = info.get("restart")
    if gen and gen != str(restart):
        return f"{INFO} names gang restart {gen}, not {restart}"
    return None


def advance(view: ProgressView, report: ProgressReport) -> ProgressView:
    """The view after ``report``: the rate's base moves to the previous report when the step moved.

    A read that shows the same step keeps the time first established for it (a step happens once).
    A step that went back (a script restarted in place) starts afresh: no rate across it.
    """
    latest = view.latest
    if latest is None or report.step < latest.step:
        return replace(view, latest=report, base=None)
    if report.step == latest.step:
        return replace(view, latest=replace(report, last_step_time=latest.last_step_time))
    return replace(view, latest=report, base=latest)
