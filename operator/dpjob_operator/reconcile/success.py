"""Success policy: when the job is done, and which ranks must then be stopped."""

from __future__ import annotations

from typing import Iterable

from dpjob_operator.reconcile.observe import PodObservation


def succeeded(policy: str, replicas: int, pods: Iterable[PodObservation]) -> bool:
    """AllRanks: every rank index has a Succeeded pod. RankZero: rank 0 Succeeded."""
    done = {p.index for p in pods if p.phase == "Succeeded"}
    if policy == "RankZero":
        return 0 in done
    return all(i in done for i in range(replicas))
