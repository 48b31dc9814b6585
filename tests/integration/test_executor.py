"""The executor on the real API server: a plan's actions become exactly these objects.

mpi-operator's habit: for a given plan, assert the objects the sync produced, owned by the job
(by UID, as controller), and nothing else. No operator runs meanwhile, so every object seen
here was made by the executor under test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from dpjob_operator.api.observed import PodObservation, RankTableOutcome, observe_pod
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.spec import Job, parse_job
from dpjob_operator.builders.configmaps import build_job_rank_tables
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.executor import Executor
from dpjob_operator.controller.gangs import Gangs
from dpjob_operator.controller.timings import Timings
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.actions import (
    ApplyRankTable,
    CreatePods,
    DeletePods,
    EnsureEnvironment,
    EnsureNetworkPolicy,
    EnsureService,
    Plan,
)
from dpjob_operator.reconcile.planner import plan_job
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.clocks import FakeClock
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


class Harness:
    """A real KubeClient and Executor, driven one plan at a time."""

    def __init__(self, api: Any) -> None:
        self.loop = asyncio.new_event_loop()
        kube = KubeClient(api, qps=50, burst=100)
        blocking = Blocking(self.loop, max_workers=4, concurrency=8)
        self.clock = FakeClock()  # the memos and expectations expire when a test moves it
        self.executor = Executor(OperatorConfig(), kube, blocking, Gangs(kube, blocking), Timings(), clock=self.clock)

    def run(self, job: Job, plan: Plan, pods: Sequence[PodObservation] = ()) -> None:
        self.loop.run_until_complete(self.executor.execute(job, plan, pods))


@pytest.fixture
def harness(api: Any, no_operator: None) -> Iterator[Harness]:
    """Nobody else may act on the job: what exists is the executor's doing."""
    h = Harness(api)
    yield h
    h.loop.close()


def _created_job(api: Any, namespace: str, replicas: int) -> Job:
    body = JobBuilder("exec", namespace).replicas(replicas).set("runPolicy", {"gangScheduling": "Disabled"}).obj()
    return parse_job(dpj.create(api, namespace, body))


def _owned_by(obj: Any, job: Job) -> bool:
    refs = obj.metadata.owner_references or []
    return [(r.uid, r.controller, r.kind) for r in refs] == [(job.uid, True, "DataParallelJob")]


def test_a_new_jobs_plan_creates_its_service_rank_table_and_rank_pods(api, core, namespace, harness):
    job = _created_job(api, namespace, replicas=3)
    table = build_job_rank_tables(job, 0, [])
    outcome = RankTableOutcome(table.ready, table.reason, table.message, table.version, table.files)
    plan = plan_job(job, {}, [], datetime.now(UTC), DEFAULT_POOLS["cpu"], outcome)
    kinds = [type(a).__name__ for a in plan.actions]
    assert kinds == ["ApplyRankTable", "EnsureService", "EnsureNetworkPolicy", "EnsureEnvironment", "CreatePods"], kinds
    harness.run(job, plan)

    svc = core.read_namespaced_service("exec", namespace)
    assert svc.spec.cluster_ip == "None" and _owned_by(svc, job)
    policy = client.NetworkingV1Api(api).read_namespaced_network_policy("exec", namespace)
    assert _owned_by(policy, job) and policy.spec.pod_selector.match_labels["dpjob.io/job-name"] == "exec"
    cms = core.list_namespaced_config_map(namespace, label_selector="dpjob.io/job-name=exec").items
    assert [cm.metadata.name for cm in cms] == ["exec-env", "exec-ranktable"] and all(_owned_by(cm, job) for cm in cms)
    assert cms[0].data["WORLD_SIZE"] == "3" and "RANK" not in cms[0].data  # shared by all; each rank's own inline
    pods = sorted(dpj.rank_pods(core, namespace, "exec"), key=lambda p: p.metadata.name)
    assert [p.metadata.name for p in pods] == ["exec-rank-0", "exec-rank-1", "exec-rank-2"]
    assert all(_owned_by(p, job) for p in pods)
    assert [dpj.env_of(p)["RANK"] for p in pods] == ["0", "1", "2"]
    assert {dpj.env_of(p)["MASTER_ADDR"] for p in pods} == {f"exec-rank-0.exec.{namespace}.svc.cluster.local"}
    assert {p.metadata.labels["dpjob.io/restart"] for p in pods} == {"0"}


def test_replaying_the_plan_creates_nothing_twice_and_deletes_only_named_pods(api, core, namespace, harness):
    job = _created_job(api, namespace, replicas=2)
    harness.run(job, Plan({}, [EnsureService(), EnsureEnvironment(), CreatePods((0, 1), 0)]))
    first = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, "exec")}
    # awaited: not POSTed again
    harness.run(job, Plan({}, [EnsureService(), EnsureEnvironment(), CreatePods((0, 1), 0)]))
    assert harness.executor.expectations.awaited_creations(job.uid, 0) == {"exec-rank-0", "exec-rank-1"}
    harness.executor.expectations.forget(job.uid)  # as once they time out unseen: the 409s are not errors
    harness.run(job, Plan({}, [EnsureService(), EnsureEnvironment(), CreatePods((0, 1), 0)]))
    again = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, "exec")}
    assert again == first

    harness.run(job, Plan({}, [DeletePods(("exec-rank-1",), "test")]))
    left = {p.metadata.name: bool(p.metadata.deletion_timestamp) for p in dpj.rank_pods(core, namespace, "exec")}
    assert left.get("exec-rank-0") is False and left.get("exec-rank-1", True) is True


def test_a_delete_planned_from_an_old_view_never_hits_the_new_pod_of_that_name(api, core, namespace, harness):
    """Rank pod names come back with every gang: a DELETE planned from a cache that still shows the
    old pod carries its UID, so the new pod of the same name survives (the kubelet's rule)."""
    job = _created_job(api, namespace, replicas=1)
    harness.run(job, Plan({}, [CreatePods((0,), 0)]))
    raw = core.api_client.sanitize_for_serialization(dpj.rank_pods(core, namespace, "exec"))
    old_view = [o for o in (observe_pod(p) for p in raw) if o is not None]
    core.delete_namespaced_pod("exec-rank-0", namespace, grace_period_seconds=0)
    wait_until(lambda: not dpj.rank_pods(core, namespace, "exec"), what="the old pod gone")
    harness.executor.expectations.forget(job.uid)
    harness.run(job, Plan({}, [CreatePods((0,), 0)]))
    new_uid = dpj.rank_pods(core, namespace, "exec")[0].metadata.uid
    harness.run(job, Plan({}, [DeletePods(("exec-rank-0",), "test")]), old_view)
    survivor = core.read_namespaced_pod("exec-rank-0", namespace)
    assert survivor.metadata.uid == new_uid and survivor.metadata.deletion_timestamp is None


def test_observed_pods_round_trip_into_the_planner(api, core, namespace, harness):
    """What the executor created, observed back, is a gang the planner does not recreate."""
    job = _created_job(api, namespace, replicas=2)
    harness.run(job, Plan({}, [CreatePods((0, 1), 0)]))
    raw = core.api_client.sanitize_for_serialization(dpj.rank_pods(core, namespace, "exec"))
    observed = [o for o in (observe_pod(p) for p in raw) if o is not None]
    plan = plan_job(job, {"restarts": 0}, observed, datetime.now(UTC), DEFAULT_POOLS["cpu"])
    assert not any(isinstance(a, CreatePods) for a in plan.actions)


def test_a_service_or_rank_table_someone_deleted_comes_back_once_the_memo_expires(api, core, namespace, harness):
    job = _created_job(api, namespace, replicas=2)
    table = build_job_rank_tables(job, 0, [])
    plan = Plan({}, [ApplyRankTable(dict(table.files)), EnsureService()])
    harness.run(job, plan)
    core.delete_namespaced_service("exec", namespace)
    core.delete_namespaced_config_map("exec-ranktable", namespace)
    harness.clock.advance(harness.executor.memo_seconds + 1)
    harness.run(job, plan)  # a later resync pass
    assert _owned_by(core.read_namespaced_service("exec", namespace), job)
    assert _owned_by(core.read_namespaced_config_map("exec-ranktable", namespace), job)


def test_a_rank_table_write_into_a_namespace_being_deleted_is_not_reported_as_a_refusal(api, core, namespace,
                                                                                        harness):
    """The namespace's 403 is not the table's fault: the pass is requeued quietly (as for pods), and the
    job's status never says RankTableWriteFailed for a job that is going away with its namespace."""
    from kubernetes import client

    from dpjob_operator.k8s import errors

    job = _created_job(api, namespace, replicas=2)
    hold = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="hold", finalizers=["dpjob.io/test-hold"]))
    core.create_namespaced_config_map(namespace, hold)  # keeps the namespace Terminating meanwhile
    try:
        core.delete_namespace(namespace)
        table = build_job_rank_tables(job, 0, [])
        with pytest.raises(errors.ApiError) as raised:
            harness.run(job, Plan({}, [ApplyRankTable(dict(table.files))]))
        assert errors.is_namespace_terminating(raised.value), raised.value
        assert harness.executor.rank_table_write_error(job.uid) is None
        with pytest.raises(errors.ApiError) as raised:  # nor a verdict on the operator's RBAC
            harness.run(job, Plan({}, [EnsureNetworkPolicy()]))
        assert errors.is_namespace_terminating(raised.value) and harness.executor.policies.enabled
    finally:
        core.patch_namespaced_config_map("hold", namespace, {"metadata": {"finalizers": None}})


def _gang_job(api: Any, namespace: str, harness: Harness) -> Job:
    from dpjob_operator.builders.gang import SCHEDULING_GROUP, SCHEDULING_VERSION

    gangs = harness.executor.gangs
    harness.loop.run_until_complete(gangs.detect("auto"))
    assert gangs.supported, f"the test cluster serves {SCHEDULING_GROUP}/{SCHEDULING_VERSION} podgroups"
    return parse_job(dpj.create(api, namespace, JobBuilder("exec", namespace).replicas(2).obj()))


def test_a_workload_someone_deleted_comes_back_with_the_next_gang_once_the_memo_expires(api, namespace, harness):
    from kubernetes import client

    from dpjob_operator.builders.gang import SCHEDULING_GROUP, SCHEDULING_VERSION
    from dpjob_operator.reconcile.actions import EnsureGang

    objects = client.CustomObjectsApi(api)
    job = _gang_job(api, namespace, harness)
    harness.run(job, Plan({}, [EnsureGang(0, 2)]))
    objects.delete_namespaced_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, namespace, "workloads", "exec")
    harness.executor.gangs.memo_seconds = 0.0
    harness.run(job, Plan({"restarts": 1}, [EnsureGang(1, 2)]))
    workload = objects.get_namespaced_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, namespace, "workloads",
                                                    "exec")
    assert workload["metadata"]["ownerReferences"][0]["uid"] == job.uid


def _first_pass(job: Job) -> Plan:
    """A new job's first plan (empty status), with its gang."""
    from dpjob_operator.api.observed import GangObservation
    from dpjob_operator.builders.gang import gang_min_count

    table = build_job_rank_tables(job, 0, [])
    outcome = RankTableOutcome(table.ready, table.reason, table.message, table.version, table.files)
    return plan_job(job, {}, [], datetime.now(UTC), DEFAULT_POOLS["cpu"], outcome,
                    GangObservation(gang_min_count(job)))


def test_a_first_pass_planned_from_an_old_view_makes_no_pod_group_and_no_pod_and_the_next_puts_it_right(
        api, core, namespace, harness):
    """A new job's first status write goes with its Service, rank table and Workload
    (reconcile/first_pass.py). When that write is refused (the user resized the job meanwhile), the
    immutable PodGroup and the pods were never made, and the next pass, from the resized spec,
    replaces the Workload and makes a PodGroup and pods of the new size."""
    from kubernetes import client

    from dpjob_operator.builders.gang import SCHEDULING_GROUP, SCHEDULING_VERSION

    objects = client.CustomObjectsApi(api)

    def gang_sizes(plural: str) -> list[int]:
        items = objects.list_namespaced_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, namespace, plural)["items"]
        specs = [(o["spec"].get("podGroupTemplates") or [o["spec"]])[0] for o in items]
        return [s["schedulingPolicy"]["gang"]["minCount"] for s in specs]

    async def refused() -> None:
        raise RuntimeError("status write refused: the job changed (409)")

    async def written() -> None:
        return None

    job = _gang_job(api, namespace, harness)
    plan = _first_pass(job)
    assert [type(a).__name__ for a in plan.actions] == ["ApplyRankTable", "EnsureService", "EnsureNetworkPolicy",
                                                        "EnsureEnvironment", "EnsureGang", "CreatePods"]
    with pytest.raises(RuntimeError, match="409"):
        harness.loop.run_until_complete(harness.executor.execute(job, plan, (), refused))
    assert core.read_namespaced_service("exec", namespace).metadata.owner_references[0].uid == job.uid
    assert gang_sizes("workloads") == [2] and gang_sizes("podgroups") == []
    assert dpj.rank_pods(core, namespace, "exec") == []

    resized = parse_job(dpj.patch(api, namespace, "exec", {"spec": {"replicas": 3}}))
    harness.loop.run_until_complete(harness.executor.execute(resized, _first_pass(resized), (), written))
    assert gang_sizes("workloads") == [3] and gang_sizes("podgroups") == [3]
    assert len(dpj.rank_pods(core, namespace, "exec")) == 3


def test_a_namespace_being_deleted_is_told_from_an_active_one(api, core, namespace):
    """What keeps a namespace deletion from restarting its gangs: read from the real API server."""
    from kubernetes import client

    from dpjob_operator.k8s.namespaces import namespace_terminating

    kube = KubeClient(api, qps=50, burst=100)
    assert namespace_terminating(kube, namespace) is False
    assert namespace_terminating(kube, "no-such-namespace-here") is True
    hold = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="hold", finalizers=["dpjob.io/test-hold"]))
    core.create_namespaced_config_map(namespace, hold)  # keeps the namespace Terminating meanwhile
    try:
        core.delete_namespace(namespace)
        assert namespace_terminating(kube, namespace) is True
    finally:
        core.patch_namespaced_config_map("hold", namespace, {"metadata": {"finalizers": None}})


def test_a_verdict_the_scheduler_writes_queues_the_jobs_pass_and_is_read_from_the_watch(api, namespace, harness):
    """The PodGroup watch: a verdict written on our PodGroup (as kube-scheduler writes it) queues
    the job, is then read with no GET, and only by the job that controls the group. The verdict has
    no polled path: the controller starts work only once this watch has listed (``wait_synced``)."""
    from kubernetes import client

    from dpjob_operator.api.names import pod_group_name
    from dpjob_operator.builders.gang import POD_GROUP_SCHEDULED, SCHEDULING_GROUP, SCHEDULING_VERSION
    from dpjob_operator.controller.gang_verdicts import GangVerdicts
    from dpjob_operator.reconcile.actions import EnsureGang

    job = _gang_job(api, namespace, harness)
    harness.run(job, Plan({}, [EnsureGang(0, 2)]))
    gangs, queued = harness.executor.gangs, []
    gangs.verdicts = GangVerdicts(gangs.kube, lambda ns, name: queued.append((ns, name)), (namespace,))
    harness.loop.run_until_complete(gangs.detect("auto"))  # the server serves PodGroups: the watch starts
    assert gangs.wait_synced(30), "the PodGroup watch listed"
    reads: list[str] = []
    get_object = gangs.kube.get_object
    gangs.kube.get_object = lambda *a: reads.append(a[-1]) or get_object(*a)  # type: ignore[method-assign]
    name = pod_group_name("exec", 0)
    unbound = [PodObservation(name=f"exec-rank-{i}", uid=f"u{i}", index=i, restart=0, phase="Pending",
                              pod_group=name) for i in range(2)]
    assert gangs.observe(job, 0, unbound).scheduled is None  # no verdict yet

    verdict = {"type": POD_GROUP_SCHEDULED, "status": "False", "reason": "Unschedulable",
               "message": "0/1 nodes are available", "lastTransitionTime": "2026-11-26T00:00:00Z"}
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        SCHEDULING_GROUP, SCHEDULING_VERSION, namespace, "podgroups", name, {"status": {"conditions": [verdict]}})
    wait_until(lambda: queued == [(namespace, "exec")], what="the verdict queued the job's pass")
    observation = gangs.observe(job, 0, unbound)
    assert observation.scheduled is not None and observation.scheduled["reason"] == "Unschedulable"
    assert reads == []
    gangs.forget(job.uid)  # as after an operator restart: this process has made nothing of the gang yet
    assert gangs.observe(job, 0, unbound).scheduled == observation.scheduled
    assert gangs.verdicts.verdict(namespace, name, "another-jobs-uid") is None
    gangs.stop()

