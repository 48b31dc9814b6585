"""The reconcile decision for one job: observed state in, new status + actions + events out.

Pure and level-triggered: given the same job, status and observed pods it always decides the
same, so an operator restart (or a lost watch event) resumes without duplicating or losing a
pod. Crash safety rests on one rule: the gang generation lives in ``status.restarts`` and
every pod carries it in the ``dpjob.io/restart`` label; pods of another generation are stale
and get deleted. The executor writes the status *before* acting, so a decided restart is never
forgotten.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Sequence

from dpjob_operator.api.spec import Job
from dpjob_operator.build.names import pod_group_name, rank_pod_name
from dpjob_operator.build.pods import pod_selector
from dpjob_operator.config import PoolConfig
from dpjob_operator.reconcile.conditions import get_condition, is_true, set_condition
from dpjob_operator.reconcile.observe import PodObservation
from dpjob_operator.reconcile.restart import decide_failure
from dpjob_operator.reconcile.success import succeeded

TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class CreatePods:
    indexes: tuple[int, ...]
    restart: int
    pod_group: str | None = None   # the gang's PodGroup, when gang-scheduled


@dataclass(frozen=True)
class DeletePods:
    names: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class EnsureService:
    pass


@dataclass(frozen=True)
class ApplyRankTable:
    files: Mapping[str, str]


@dataclass(frozen=True)
class DeleteJob:
    reason: str


@dataclass(frozen=True)
class EnsureGang:
    """The Workload and this generation's PodGroup exist (older generations' PodGroups go)."""

    restart: int
    min_count: int


@dataclass(frozen=True)
class ReleaseGang:
    """No PodGroup or Workload of the job remains (terminal or suspended: nothing to schedule)."""


Action = CreatePods | DeletePods | EnsureService | ApplyRankTable | DeleteJob | EnsureGang | ReleaseGang


@dataclass(frozen=True)
class GangObservation:
    """Gang scheduling is in effect for this job (see build.gang)."""

    min_count: int
    # The scheduler's PodGroupScheduled condition on the current generation's PodGroup, or None
    # while it has not judged it (or nobody looked, because every rank is already bound).
    scheduled: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Event:
    type: str      # Normal | Warning
    reason: str
    message: str


@dataclass
class Plan:
    status: dict[str, Any]
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class RankTableOutcome:
    """What the rank-table builder said about the current gang (None when disabled)."""

    ready: bool
    reason: str
    message: str
    format: str
    files: Mapping[str, str]


def iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


class _Ctx:
    """Mutable scratch state of one planning pass."""

    def __init__(self, job: Job, status: Mapping[str, Any], now: datetime) -> None:
        self.job = job
        self.old = dict(status)
        self.status: dict[str, Any] = copy.deepcopy(dict(status))
        self.now = now
        self.now_s = iso(now)
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.gang: GangObservation | None = None

    def release_gang(self) -> None:
        """Nothing left to schedule: drop the PodGroup and Workload (once; status remembers)."""
        if self.status.pop("gang", None) is not None:
            self.actions.append(ReleaseGang())

    def cond(self, type_: str, value: bool, reason: str, message: str) -> None:
        self.status["conditions"] = set_condition(self.status.get("conditions") or [], type_, value, reason,
                                                  message, self.now_s, self.job.generation)

    def phase(self, phase: str, reason: str, message: str, event_type: str = "Normal") -> None:
        if (self.status.get("phase"), self.status.get("reason")) != (phase, reason):
            self.events.append(Event(event_type, reason, message))
        self.status["phase"] = phase
        self.status["reason"] = reason
        self.status["message"] = message

    def plan(self) -> Plan:
        return Plan(self.status, self.actions, self.events)


def plan_job(job: Job, status: Mapping[str, Any], pods: Sequence[PodObservation], now: datetime,
             pool: PoolConfig | None, rank_table: RankTableOutcome | None = None,
             gang: GangObservation | None = None) -> Plan:
    """Decide what to do for ``job`` now. See the module docstring for the invariants.

    ``gang`` is None when the ranks are scheduled one by one (the cluster has no gang API, the
    operator or the job disabled it).
    """
    ctx = _Ctx(job, status, now)
    ctx.gang = gang
    spec = job.spec
    gen = int(ctx.status.get("restarts", 0))
    current = sorted((p for p in pods if p.restart == gen), key=lambda p: (p.index, p.name))
    stale = [p for p in pods if p.restart != gen and not p.deleting]

    ctx.status.update(observedGeneration=job.generation, worldSize=spec.world_size, selector=pod_selector(job))
    ctx.status.setdefault("restarts", 0)
    ctx.status.setdefault("failureRestarts", 0)
    _count(ctx, current)
    if stale:
        ctx.actions.append(DeletePods(tuple(p.name for p in stale), "StaleGeneration"))

    phase = ctx.status.get("phase")
    if phase in TERMINAL:
        _finish(ctx, current, phase)
        return ctx.plan()

    if pool is None:
        ctx.cond("PoolAvailable", False, "PoolNotConfigured",
                 f"the operator has no node pool for accelerator {spec.accelerator!r}; ask the cluster admin "
                 f"to add it to the operator's pools")
        ctx.phase("Pending", "PoolNotConfigured", f"no node pool configured for accelerator {spec.accelerator!r}",
                  "Warning")
        return ctx.plan()
    if get_condition(ctx.status.get("conditions") or [], "PoolAvailable"):
        ctx.cond("PoolAvailable", True, "PoolConfigured", f"node pool {spec.accelerator!r} is configured")

    # Suspend (Kueue's contract): no pods while suspended; the clock restarts on resume.
    if spec.run_policy.suspend:
        active = [p.name for p in current if not p.deleting]
        if active:
            ctx.actions.append(DeletePods(tuple(active), "Suspended"))
        ctx.release_gang()
        ctx.cond("Suspended", True, "Suspended", "the job is suspended: rank pods are deleted")
        ctx.phase("Suspended", "Suspended", "the job is suspended (spec.runPolicy.suspend)")
        ctx.status.pop("startTime", None)
        return ctx.plan()
    if is_true(ctx.status.get("conditions") or [], "Suspended"):
        ctx.cond("Suspended", False, "Resumed", "the job was resumed")
        ctx.events.append(Event("Normal", "Resumed", "the job was resumed: recreating the rank pods"))

    ctx.status.setdefault("startTime", ctx.now_s)
    if ctx.status.get("phase") is None:
        ctx.phase("Pending", "Accepted", f"creating {spec.replicas} rank pod(s), world size {spec.world_size}")
        ctx.cond("Created", False, "Creating", "rank pods are being created")

    # Deadline: the whole run, restarts included.
    deadline = spec.run_policy.active_deadline_seconds
    start = parse_iso(ctx.status.get("startTime"))
    if deadline and start and now >= start + timedelta(seconds=deadline):
        _fail(ctx, current, "DeadlineExceeded",
              f"the job ran longer than spec.runPolicy.activeDeadlineSeconds={deadline}")
        return ctx.plan()

    # A failed or disrupted rank decides for the whole gang.
    failed = [p for p in current if p.phase == "Failed" or (p.disrupted and not p.deleting)]
    if failed:
        _on_failure(ctx, current, failed[0])
        return ctx.plan()
    # A static gang was created for another size (kubectl scale): restart it at the new size.
    if spec.rendezvous.mode == "static":
        resized = [p for p in current if p.replicas_annotation not in (None, spec.replicas) and not p.deleting]
        if resized:
            _restart(ctx, current, "Resized", counted=False,
                     message=f"spec.replicas changed to {spec.replicas}: restarting the gang at the new size")
            return ctx.plan()

    if ctx.status.get("phase") == "Running" and spec.rendezvous.mode == "static":
        # A rank deleted by someone else (kubectl delete, eviction, a drain) while the gang runs:
        # the static group lost a member, so the whole gang restarts (not charged). We never
        # delete a current rank of a running gang ourselves: a restart first moves to a new generation.
        present = {p.index for p in current}
        vanished = [i for i in range(spec.replicas) if i not in present]
        terminating = [p for p in current if p.deleting and p.index < spec.replicas]
        if terminating:
            gone = replace(terminating[0], reason=terminating[0].reason or "PodDeleted", disrupted=True)
        elif vanished:
            gone = PodObservation(name=rank_pod_name(job.name, vanished[0]), uid="", index=vanished[0],
                                  restart=gen, phase="Unknown", reason="PodDeleted", disrupted=True)
        if terminating or vanished:
            _on_failure(ctx, current, gone)
            return ctx.plan()

    if succeeded(spec.success_policy, spec.replicas, current):
        leftovers = [p.name for p in current if p.active]
        if leftovers:
            ctx.actions.append(DeletePods(tuple(leftovers), "JobSucceeded"))
        ctx.release_gang()
        ctx.status["completionTime"] = ctx.now_s
        ctx.cond("Running", False, "JobSucceeded", "the job has finished")
        ctx.cond("Succeeded", True, "JobSucceeded", _success_message(spec.success_policy, spec.replicas))
        ctx.phase("Succeeded", "JobSucceeded", _success_message(spec.success_policy, spec.replicas))
        _count(ctx, [p for p in current if p.name not in leftovers])
        return ctx.plan()

    _converge(ctx, current, pods, gen, rank_table)
    return ctx.plan()


def _success_message(policy: str, replicas: int) -> str:
    if policy == "RankZero":
        return "rank 0 succeeded (successPolicy RankZero); remaining ranks are stopped"
    return f"all {replicas} rank(s) succeeded"


def _count(ctx: _Ctx, current: Sequence[PodObservation]) -> None:
    spec = ctx.job.spec
    live = [p for p in current if not p.deleting]
    ready = sum(1 for p in live if p.phase == "Running" and p.ready)
    ctx.status.update(
        replicas=len(live),
        readyReplicas=ready,
        runningReplicas=sum(1 for p in live if p.phase == "Running"),
        succeededReplicas=sum(1 for p in live if p.phase == "Succeeded"),
        failedReplicas=sum(1 for p in live if p.phase == "Failed"),
        ready=f"{ready}/{spec.replicas}",
    )


def _converge(ctx: _Ctx, current: list[PodObservation], all_pods: Sequence[PodObservation], gen: int,
              rank_table: RankTableOutcome | None) -> None:
    """Create what is missing, delete what is extra, and say where the gang stands."""
    spec = ctx.job.spec
    ctx.actions.append(EnsureService())  # the executor remembers it per job uid: no API call after the first
    names_in_use = {p.name for p in all_pods}
    present = {p.index for p in current}
    missing = tuple(i for i in range(spec.replicas) if i not in present
                    and rank_pod_name(ctx.job.name, i) not in names_in_use)
    group = _gang_of_generation(ctx, current, gen)
    if group is not None and ctx.gang is not None:
        # Before the pods: a rank naming a PodGroup that does not exist yet waits for it anyway,
        # but the group must be whole before the scheduler can admit any of it.
        ctx.actions.append(EnsureGang(gen, ctx.gang.min_count))
        ctx.status["gang"] = {"podGroup": group, "minCount": ctx.gang.min_count}
    elif group is None:
        ctx.release_gang()
    if missing:
        ctx.actions.append(CreatePods(missing, gen, group))
    extra = [p.name for p in current if p.index >= spec.replicas and not p.deleting]
    if extra:  # elastic scale-down: the highest ranks leave, torchrun re-forms the group
        ctx.actions.append(DeletePods(tuple(extra), "ScaledDown"))

    live = [p for p in current if not p.deleting and p.index < spec.replicas]
    running = [p for p in live if p.phase == "Running"]
    all_created = len(live) == spec.replicas
    if all_created:
        ctx.cond("Created", True, "PodsCreated", f"all {spec.replicas} rank pod(s) exist")

    unschedulable = [p for p in live if p.phase == "Pending" and p.unschedulable]
    verdict = ctx.gang.scheduled if ctx.gang is not None else None
    if verdict is not None and verdict.get("status") == "False" and any(not p.node for p in live):
        msg = (f"the gang of {ctx.gang.min_count} rank(s) cannot be placed together, so no rank holds a node: "
               f"{verdict.get('message') or verdict.get('reason') or 'Unschedulable'}")
        if unschedulable:  # the PodGroup says that; the pod says why
            p = unschedulable[0]
            msg += f"; rank {p.index} (pod {p.name}): {p.unschedulable}"
        was = get_condition(ctx.status.get("conditions") or [], "PodsScheduled")
        if not was or was.get("reason") != "GangUnschedulable":
            ctx.events.append(Event("Warning", "GangUnschedulable", msg))
        ctx.cond("PodsScheduled", False, "GangUnschedulable", msg)
    elif unschedulable:
        p = unschedulable[0]
        msg = f"rank {p.index} (pod {p.name}) cannot be scheduled: {p.unschedulable}"
        if is_true(ctx.status.get("conditions") or [], "PodsScheduled") or \
                get_condition(ctx.status.get("conditions") or [], "PodsScheduled") is None:
            ctx.events.append(Event("Warning", "Unschedulable", msg))
        ctx.cond("PodsScheduled", False, "Unschedulable", msg)
    elif live and all(p.node for p in live):
        ctx.cond("PodsScheduled", True, "Scheduled", "every rank pod is bound to a node")

    if rank_table is not None:
        _rank_table_status(ctx, rank_table, gen)

    finished = [p for p in live if p.phase == "Succeeded"]
    if running and len(running) + len(finished) == spec.replicas and ctx.old.get("phase") == "Running":
        # Some ranks finished first (AllRanks waits for the rest): still Running, not a regression.
        ctx.status["message"] = f"{len(finished)}/{spec.replicas} rank(s) finished, {len(running)} still running"
    elif len(running) == spec.replicas:
        ctx.cond("Running", True, "AllRanksRunning", f"all {spec.replicas} rank(s) are running")
        if ctx.old.get("phase") == "Restarting":
            ctx.cond("Restarting", False, "Recovered", f"the gang of restart {gen} is running")
        ctx.phase("Running", "AllRanksRunning",
                  f"all {spec.replicas} rank(s) running, world size {spec.world_size}")
    elif ctx.status.get("phase") == "Restarting":
        ctx.status["message"] = f"restart {gen}: {len(running)}/{spec.replicas} rank(s) running"
    elif ctx.old.get("phase") == "Running" and spec.rendezvous.mode == "elastic":
        # torchrun keeps training with the ranks it has while a rank is replaced or added: the
        # job is still Running, not back to Pending.
        ctx.status["message"] = (f"elastic: {len(running)}/{spec.replicas} rank(s) running, "
                                 f"{spec.replicas - len(running)} joining")
    elif all_created:
        ctx.phase("Created", "PodsCreated",
                  f"all {spec.replicas} rank pod(s) created, {len(running)}/{spec.replicas} running")
    else:
        ctx.phase("Pending", "Accepted", f"creating {spec.replicas} rank pod(s), world size {spec.world_size}")


def _gang_of_generation(ctx: _Ctx, current: list[PodObservation], gen: int) -> str | None:
    """The PodGroup the ranks of generation ``gen`` belong to, or None: decided once per gang.

    A generation whose first ranks exist keeps what they have: a rank added to it later joins
    the same PodGroup, or none, whatever the operator or the job says now. Otherwise a group
    with minCount N could get fewer than N members (they would wait forever), or a gang's
    members could lose their PodGroup. A change (operator config, API enabled, the job's
    ``gangScheduling``) takes effect with the next generation.
    """
    existing = [p for p in current if not p.deleting]
    if existing:
        return next((p.pod_group for p in existing if p.pod_group), None)
    return pod_group_name(ctx.job.name, gen) if ctx.gang is not None else None


def _rank_table_status(ctx: _Ctx, outcome: RankTableOutcome, gen: int) -> None:
    ctx.status["rankTable"] = {"format": outcome.format, "configMap": f"{ctx.job.name}-ranktable",
                               "restart": gen, "ready": outcome.ready, "reason": outcome.reason}
    was = get_condition(ctx.status.get("conditions") or [], "RankTableReady")
    if outcome.ready and not (was and was.get("status") == "True" and ctx.old.get("rankTable", {}).get("restart") == gen):
        ctx.events.append(Event("Normal", "RankTableReady", f"rank table ({outcome.format}) completed for restart {gen}"))
    if not outcome.ready and outcome.reason.startswith("Invalid") and (not was or was.get("reason") != outcome.reason):
        ctx.events.append(Event("Warning", outcome.reason, outcome.message))
    ctx.cond("RankTableReady", outcome.ready, outcome.reason, outcome.message)
    # Before any pod creation: a kubelet holds a pod in ContainerCreating until its ConfigMap exists.
    ctx.actions.insert(0, ApplyRankTable(dict(outcome.files)))


def _on_failure(ctx: _Ctx, current: list[PodObservation], pod: PodObservation) -> None:
    decision = decide_failure(ctx.job.spec.run_policy, pod, int(ctx.status.get("failureRestarts", 0)))
    ctx.status["lastFailure"] = {
        "rank": pod.index, "pod": pod.name, "node": pod.node or "",
        "exitCode": pod.exit_code if pod.exit_code is not None else -1,
        "reason": pod.reason or decision.reason, "message": (pod.message or "")[:1024],
        "restart": int(ctx.status.get("restarts", 0)), "time": ctx.now_s,
    }
    if decision.restart:
        _restart(ctx, current, decision.reason, decision.counted, decision.message)
    else:
        _fail(ctx, current, decision.reason, decision.message)


def _restart(ctx: _Ctx, current: list[PodObservation], reason: str, counted: bool, message: str) -> None:
    """Gang restart: bump the generation (in status, written first), delete every current pod."""
    gen = int(ctx.status.get("restarts", 0)) + 1
    ctx.status["restarts"] = gen
    if counted:
        ctx.status["failureRestarts"] = int(ctx.status.get("failureRestarts", 0)) + 1
    by_reason = dict(ctx.status.get("restartsByReason") or {})
    by_reason[reason] = by_reason.get(reason, 0) + 1
    ctx.status["restartsByReason"] = by_reason
    doomed = [p.name for p in current if not p.deleting]
    if doomed:
        ctx.actions.append(DeletePods(tuple(doomed), f"GangRestart{reason}"))
    ctx.cond("Running", False, "Restarting", message)
    ctx.cond("Restarting", True, reason, message)
    ctx.events.append(Event("Warning", "GangRestart", f"restart {gen}: {message}"))
    ctx.status["phase"] = "Restarting"
    ctx.status["reason"] = reason
    ctx.status["message"] = message
    _count(ctx, [])


def _fail(ctx: _Ctx, current: list[PodObservation], reason: str, message: str) -> None:
    ctx.status["completionTime"] = ctx.now_s
    ctx.cond("Running", False, reason, message)
    ctx.cond("Failed", True, reason, message)
    ctx.phase("Failed", reason, message, "Warning")
    _finish(ctx, current, "Failed")


def _finish(ctx: _Ctx, current: list[PodObservation], phase: str) -> None:
    """Terminal: honour cleanPodPolicy on every path, then ttlSecondsAfterFinished.

    Running ranks are always stopped on success (a Succeeded job never holds accelerators);
    on failure ``None`` keeps even running pods for debugging a hang.
    """
    policy = ctx.job.spec.run_policy
    if policy.clean_pod_policy == "All":
        doomed = [p.name for p in current if not p.deleting]
    elif policy.clean_pod_policy == "None" and phase == "Failed":
        doomed = []
    else:
        doomed = [p.name for p in current if p.active]
    if doomed:
        ctx.actions.append(DeletePods(tuple(doomed), f"CleanPodPolicy{policy.clean_pod_policy}"))
    ctx.release_gang()
    _count(ctx, [p for p in current if p.name not in doomed])
    ttl = policy.ttl_seconds_after_finished
    done = parse_iso(ctx.status.get("completionTime"))
    if ttl is not None and done and ctx.now >= done + timedelta(seconds=ttl):
        ctx.actions.append(DeleteJob(f"ttlSecondsAfterFinished={ttl} elapsed"))


def next_wakeup(job: Job, status: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until a time-based decision (deadline or TTL) is due, if any."""
    rp = job.spec.run_policy
    due: list[datetime] = []
    start = parse_iso(status.get("startTime"))
    if rp.active_deadline_seconds and start and status.get("phase") not in TERMINAL:
        due.append(start + timedelta(seconds=rp.active_deadline_seconds))
    done = parse_iso(status.get("completionTime"))
    if rp.ttl_seconds_after_finished is not None and done and status.get("phase") in TERMINAL:
        due.append(done + timedelta(seconds=rp.ttl_seconds_after_finished))
    if not due:
        return None
    return max(0.0, (min(due) - now).total_seconds())
