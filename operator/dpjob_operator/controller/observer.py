"""The observe step of a pass: everything ``plan_job`` needs to know besides the job itself.

The rank pods come from the watch-fed cache (no API call); the rank table is computed from them
(pure); only the gang may cost a read, and only while the scheduler still has to judge it.
Whether to look again soon is part of the observation: the scheduler's first verdict lands on a
PodGroup, which we do not watch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpjob_operator.api.observed import GangObservation, PodObservation, RankTableOutcome
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.configmaps import build_job_rank_tables
from dpjob_operator.builders.ranktable import RankTableError
from dpjob_operator.controller.gangs import Gangs
from dpjob_operator.k8s.podcache import PodCache


@dataclass(frozen=True)
class Observation:
    pods: list[PodObservation]
    rank_table: RankTableOutcome | None   # None: the job asked for no rank table
    gang: GangObservation | None          # None: ranks are scheduled one by one
    awaiting_verdict: bool = False        # a PodGroup the scheduler has not judged yet


def rank_table_outcome(job: Job, gen: int, pods: Sequence[PodObservation]) -> RankTableOutcome | None:
    """The rank table of generation ``gen`` as far as the pods allow; a request the builder rejects
    becomes a reason the planner reports (InvalidRankTableRequest), not an exception."""
    if job.spec.rank_table.format == "none":
        return None
    try:
        result = build_job_rank_tables(job, gen, pods)
    except RankTableError as e:
        return RankTableOutcome(False, "InvalidRankTableRequest", str(e), "none", {})
    return RankTableOutcome(result.ready, result.reason, result.message, result.version, result.files)


class Observer:
    def __init__(self, pods: PodCache, gangs: Gangs) -> None:
        self.pods = pods
        self.gangs = gangs

    async def observe(self, job: Job, gen: int) -> Observation:
        """What the cluster holds for generation ``gen`` (the job's ``status.restarts``)."""
        pods = self.pods.pods_for(job.namespace, job.name)
        outcome = rank_table_outcome(job, gen, pods)
        if not self.gangs.enabled_for(job):
            return Observation(pods, outcome, None)
        gang, awaiting = await self.gangs.observe(job, gen, pods)
        return Observation(pods, outcome, gang, awaiting)
