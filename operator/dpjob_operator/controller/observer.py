"""The observe step of a pass: everything ``plan_job`` needs to know besides the job itself.

The rank pods come from the watch-fed cache (no API call); the rank table is computed from them
(pure); only the gang may cost a read, and only while the scheduler still has to judge it.
Whether to look again soon is part of the observation: the scheduler's first verdict lands on a
PodGroup, which we do not watch. Progress is what rank 0 last reported to the progress reader
(controller/progress.py), which reads it only while the job is Running. The health of the gang's
nodes comes from the node watch (k8s/nodecache.py). The job's Kueue Workload
comes from a watch too (controller/kueue.py); only the ResourceFlavors of an admission cost a read,
once in a while.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from dpjob_operator.api.observed import GangObservation, KueueObservation, NodeView, PodObservation, RankTableOutcome
from dpjob_operator.api.progress import ProgressView
from dpjob_operator.api.spec import Job, JobSpec
from dpjob_operator.api.timestamps import parse_iso
from dpjob_operator.api.tolerations import untolerated
from dpjob_operator.builders.configmaps import build_job_rank_tables
from dpjob_operator.builders.env import metrics_port
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.builders.ranktable import RankTableError
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.gangs import Gangs
from dpjob_operator.controller.kueue import KueueWorkloads
from dpjob_operator.controller.progress import ProgressReader, Target
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.namespaces import namespace_terminating
from dpjob_operator.k8s.nodecache import NodeCache
from dpjob_operator.k8s.nodes import node_state
from dpjob_operator.k8s.podcache import PodCache
from dpjob_operator.reconcile.node_loss import gang_pods


@dataclass(frozen=True)
class Observation:
    pods: list[PodObservation]
    rank_table: RankTableOutcome | None   # None: the job asked for no rank table
    gang: GangObservation | None          # None: ranks are scheduled one by one
    progress: ProgressView | None = None  # None: rank 0 is not being read (the job is not Running)
    nodes: NodeView | None = None         # the nodes of stuck and failed ranks, and of the gang (node watch on)
    # The namespace is being deleted (read only when a running gang lost a rank): no pass then.
    namespace_terminating: bool = False
    kueue: KueueObservation | None = None  # None: Kueue does not queue this job


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


class RankTableMemo:
    """The last rank-table outcome per job, reused while nothing it was built from has changed.

    An idle pass (a resync, or an event of an unrelated field) would otherwise rebuild and
    re-serialise the whole table: about 0.3 s at 4,096 x 8. The pod cache replaces a pod's
    (frozen) ``PodObservation`` whenever the pod changes and keeps the others, so "the same spec,
    generation and pod objects" is exact and costs one identity check per pod.
    """

    def __init__(self) -> None:
        self._memo: dict[str, tuple[JobSpec, int, tuple[PodObservation, ...], RankTableOutcome | None]] = {}

    def outcome(self, job: Job, gen: int, pods: Sequence[PodObservation]) -> RankTableOutcome | None:
        hit = self._memo.get(job.uid)
        if (hit is not None and hit[1] == gen and len(hit[2]) == len(pods)
                and all(a is b for a, b in zip(hit[2], pods, strict=True)) and hit[0] == job.spec):
            return hit[3]
        result = rank_table_outcome(job, gen, pods)
        self._memo[job.uid] = (job.spec, gen, tuple(pods), result)
        return result

    def forget(self, uid: str) -> None:
        self._memo.pop(uid, None)


def progress_target(job: Job, gen: int, phase: str | None, pods: Sequence[PodObservation]) -> Target | None:
    """Rank 0 of gang ``gen`` while the job is Running and that pod runs with an address, else None.
    Its answer must name the generation rank 0 runs: ``gen`` plus its restarts in place."""
    if phase != "Running":
        return None
    rank0 = next((p for p in pods if p.index == 0 and p.restart == gen and p.phase == "Running" and p.pod_ip
                  and not p.deleting and p.owner_uid == job.uid), None)
    if rank0 is None or rank0.pod_ip is None:
        return None
    return Target((job.namespace, job.name), job.name, rank0.gang_generation, rank0.pod_ip, metrics_port(job))


def nodes_to_judge(pods: Sequence[PodObservation], gen: int, now: datetime, stuck_after: float,
                   finished: bool = False) -> set[str]:
    """The only nodes ever read: those of pods past their deletion deadline by ``stuck_after``, and,
    while the job can still restart (not ``finished``), those of failed ranks of the current gang (the
    restart may have to avoid them). Usually none: a finished job's failed pods, kept by
    cleanPodPolicy, must not cost a read per resync for as long as the job exists."""
    out = set()
    for p in pods:
        deadline = parse_iso(p.deletion_timestamp) if p.deleting else None
        if deadline is not None and p.node and (now - deadline).total_seconds() >= stuck_after:
            out.add(p.node)
        if not finished and p.node and p.restart == gen and not p.deleting and (p.phase == "Failed" or p.disrupted):
            out.add(p.node)
    return out


def lost_a_rank(job: Job, gen: int, pods: Sequence[PodObservation], phase: str | None) -> bool:
    """A rank of the running gang is being deleted or gone: someone else deleted it, or its namespace
    is going away (the only case in which the namespace is read)."""
    if phase != "Running":
        return False
    replicas = job.spec.replicas
    current = [p for p in pods if p.owner_uid == job.uid and p.restart == gen and p.index < replicas]
    return any(p.deleting for p in current) or len({p.index for p in current}) < replicas


class Observer:
    def __init__(self, pods: PodCache, gangs: Gangs, progress: ProgressReader, kube: KubeClient,
                 blocking: Blocking, cfg: OperatorConfig, kueue: KueueWorkloads, nodes: NodeCache) -> None:
        self.pods = pods
        self.nodes = nodes
        self.gangs = gangs
        self.kueue = kueue
        self.progress = progress
        self.kube, self.blocking, self.cfg = kube, blocking, cfg
        self.rank_tables = RankTableMemo()

    async def _nodes(self, job: Job, gen: int, pods: Sequence[PodObservation], phase: str | None) -> NodeView:
        """The nodes to judge, from the node watch; one is read only when the watch is off, or does not
        hold it (deleted, or too new for the watch yet: a read tells which)."""
        stuck_after = self.cfg.stuck_terminating_seconds
        finished = phase in ("Succeeded", "Failed")
        judged = nodes_to_judge(pods, gen, datetime.now(UTC), stuck_after, finished)
        names = set(judged)
        if self.nodes.enabled and not finished:
            names |= {p.node for p in gang_pods(pods, gen, job.uid) if p.node}
        if not names:
            return NodeView(stuck_after)
        pool = self.cfg.pools.get(job.spec.accelerator)
        # The tolerations (a pod built to learn them) matter to placement only: for stuck or failed ranks.
        tolerations = build_rank_pod(job, 0, gen, pool)["spec"].get("tolerations") or [] if pool and judged else []
        health, taints, no_execute = {}, {}, {}
        for name in sorted(names):
            state = self.nodes.get(name)
            health[name], node_taints = state if state is not None else await self.blocking.run(
                node_state, self.kube, name)
            if name in judged:
                taints[name] = tuple(untolerated(node_taints, tolerations))
            no_execute[name] = tuple(str(t.get("key")) for t in node_taints if t.get("effect") == "NoExecute")
        return NodeView(stuck_after, health, taints, no_execute)

    async def observe(self, job: Job, gen: int, phase: str | None = None) -> Observation:
        """What the cluster holds for generation ``gen`` (the job's ``status.restarts``) in ``phase``."""
        pods = self.pods.pods_for(job.namespace, job.name)
        if lost_a_rank(job, gen, pods, phase) and await self.blocking.run(namespace_terminating, self.kube,
                                                                          job.namespace):
            return Observation(pods, None, None, namespace_terminating=True)
        outcome = self.rank_tables.outcome(job, gen, pods)
        progress = self.progress.watch(job.uid, progress_target(job, gen, phase, pods))
        nodes = await self._nodes(job, gen, pods, phase)
        gang = self.gangs.observe(job, gen, pods) if self.gangs.enabled_for(job) else None
        return Observation(pods, outcome, gang, progress=progress, nodes=nodes, kueue=await self.kueue.observe(job))
