"""Gang scheduling decisions and objects (Kubernetes' Workload API), table-driven, no cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dpjob_operator.api.observed import GangObservation
from dpjob_operator.api.timestamps import iso
from dpjob_operator.builders import gang
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.config import DEFAULT_POOLS, load_config
from dpjob_operator.reconcile.actions import (
    CreatePods,
    EnsureEnvironment,
    EnsureGang,
    EnsureNetworkPolicy,
    EnsureService,
    ReleaseGang,
)
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def plan(builder, status=None, pods=(), gang_obs=None):
    return plan_job(builder.job(), status or {}, list(pods), NOW, DEFAULT_POOLS["gpu"], None, gang_obs)


@pytest.mark.parametrize("builder, expected", [
    (JobBuilder().replicas(4), 4),                      # static: every rank or none
    (JobBuilder().replicas(6).elastic(2, 8), 2),        # elastic: the minimum starts training
    (JobBuilder().replicas(1).elastic(2, 8), 1),        # never more than the pods that exist
])
def test_min_count_is_the_ranks_training_cannot_start_without(builder, expected):
    assert gang.gang_min_count(builder.job()) == expected


@pytest.mark.parametrize("supported, policy, expected", [
    (True, "Auto", True), (True, "Disabled", False), (False, "Auto", False), (False, "Disabled", False)])
def test_gang_is_used_only_when_the_cluster_serves_it_and_the_job_allows_it(supported, policy, expected):
    job = JobBuilder().run_policy(gangScheduling=policy).job()
    assert gang.gang_enabled(job, supported) is expected


def test_pod_group_references_the_workload_template_and_is_owned_by_the_job():
    job = JobBuilder("resnet", "team-a").replicas(4).job()
    workload, group = gang.build_workload(job), gang.build_pod_group(job, 3)
    assert workload["metadata"]["name"] == "resnet" and group["metadata"]["name"] == "resnet-gang-3"
    assert workload["spec"]["controllerRef"] == {"apiGroup": "dpjob.io", "kind": "DataParallelJob", "name": "resnet"}
    assert workload["spec"]["podGroupTemplates"] == [{"name": "ranks",
                                                      "schedulingPolicy": {"gang": {"minCount": 4}}}]
    assert group["spec"] == {"podGroupTemplateRef": {"workload": {"workloadName": "resnet",
                                                                  "podGroupTemplateName": "ranks"}},
                             "schedulingPolicy": {"gang": {"minCount": 4}}}
    assert group["metadata"]["labels"]["dpjob.io/restart"] == "3"
    for obj in (workload, group):
        assert obj["apiVersion"] == "scheduling.k8s.io/v1alpha2" and obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["ownerReferences"][0]["kind"] == "DataParallelJob"
    assert gang.workload_matches(workload, job)
    assert not gang.workload_matches(workload, JobBuilder("resnet", "team-a").replicas(8).job())
    assert "schedulingConstraints" not in group["spec"]


def test_rank_pod_names_its_pod_group_only_when_gang_scheduled():
    job = JobBuilder().replicas(2).job()
    assert build_rank_pod(job, 0, 1, DEFAULT_POOLS["gpu"], pod_group="train-gang-1")["spec"]["schedulingGroup"] == \
        {"podGroupName": "train-gang-1"}
    assert "schedulingGroup" not in build_rank_pod(job, 0, 1, DEFAULT_POOLS["gpu"])["spec"]


def test_new_gang_creates_its_pod_group_before_its_pods():
    p = plan(JobBuilder().replicas(4), gang_obs=GangObservation(4))
    assert p.actions == [EnsureService(), EnsureNetworkPolicy(), EnsureEnvironment(), EnsureGang(0, 4),
                         CreatePods((0, 1, 2, 3), 0, "train-gang-0")]
    assert p.status["gang"] == {"podGroup": "train-gang-0", "minCount": 4}


def test_without_gang_pods_name_no_pod_group_and_nothing_is_released_that_never_existed():
    p = plan(JobBuilder().replicas(2))
    assert p.actions == [EnsureService(), EnsureNetworkPolicy(), EnsureEnvironment(), CreatePods((0, 1), 0, None)]
    assert "gang" not in p.status


def test_gang_switched_off_releases_the_old_pod_group():
    status = {"phase": "Created", "restarts": 0, "gang": {"podGroup": "train-gang-0", "minCount": 2}}
    p = plan(JobBuilder().replicas(2), status, [pod(0), pod(1, "Pending", node=None)])
    assert ReleaseGang() in p.actions and "gang" not in p.status


def test_unschedulable_gang_is_reported_once_with_the_schedulers_reason():
    verdict = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
               "message": "pod group is unschedulable"}
    pending = [pod(i, "Pending", node=None, unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
               for i in range(3)]
    p = plan(JobBuilder().replicas(3), {"phase": "Created", "restarts": 0, "startTime": iso(NOW)}, pending,
             GangObservation(3, verdict))
    cond = next(c for c in p.status["conditions"] if c["type"] == "PodsScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "GangUnschedulable")
    assert "gang of 3 rank(s) cannot be placed together" in cond["message"]
    assert cond["message"].endswith("pod group is unschedulable; rank 0 (pod train-rank-0): "
                                    "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    assert [e.reason for e in p.events if e.type == "Warning"] == ["GangUnschedulable"]
    again = plan(JobBuilder().replicas(3), p.status, pending, GangObservation(3, verdict))
    assert "GangUnschedulable" not in [e.reason for e in again.events]


def test_a_gang_that_got_its_nodes_is_not_reported_unschedulable_from_a_stale_verdict():
    stale = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "earlier"}
    p = plan(JobBuilder().replicas(2), {"phase": "Created", "restarts": 0}, [pod(0, "Pending"), pod(1, "Pending")],
             GangObservation(2, stale))
    cond = next(c for c in p.status["conditions"] if c["type"] == "PodsScheduled")
    assert cond["status"] == "True"


@pytest.mark.parametrize("status_extra, spec, pods", [
    ({"phase": "Succeeded", "completionTime": iso(NOW)}, {}, [pod(0, "Succeeded"), pod(1, "Succeeded")]),
    ({"phase": "Failed", "completionTime": iso(NOW)}, {}, [pod(0, "Failed"), pod(1)]),
    ({"phase": "Running"}, {"suspend": True}, [pod(0), pod(1)]),
])
def test_terminal_and_suspended_jobs_release_their_gang_once(status_extra, spec, pods):
    status = {"restarts": 0, "gang": {"podGroup": "train-gang-0", "minCount": 2}, **status_extra}
    p = plan(JobBuilder().replicas(2).run_policy(**spec), status, pods, GangObservation(2))
    assert ReleaseGang() in p.actions and "gang" not in p.status
    again = plan(JobBuilder().replicas(2).run_policy(**spec), p.status, pods, GangObservation(2))
    assert ReleaseGang() not in again.actions


def test_gang_restart_moves_the_next_gang_to_a_new_pod_group():
    status = {"phase": "Restarting", "restarts": 1, "gang": {"podGroup": "train-gang-0", "minCount": 2}}
    p = plan(JobBuilder().replicas(2), status, [], GangObservation(2))
    assert EnsureGang(1, 2) in p.actions and CreatePods((0, 1), 1, "train-gang-1") in p.actions
    assert p.status["gang"]["podGroup"] == "train-gang-1"


@pytest.mark.parametrize("environ, expected", [({}, "auto"), ({"DPJOB_GANG_SCHEDULING": "disabled"}, "disabled")])
def test_operator_gang_mode_from_the_environment(environ, expected):
    assert load_config(environ=environ).gang_scheduling == expected


def test_an_unknown_operator_gang_mode_is_refused_at_start():
    with pytest.raises(ValueError, match="gangScheduling must be one of auto, disabled"):
        load_config(environ={"DPJOB_GANG_SCHEDULING": "volcano"})


def test_topology_key_puts_the_whole_gang_in_one_domain():
    job = JobBuilder().replicas(2).set("placement", {"topologyKey": "dpjob.io/rack"}).job()
    constraint = {"topology": [{"key": "dpjob.io/rack"}]}
    assert gang.build_pod_group(job, 0)["spec"]["schedulingConstraints"] == constraint
    assert gang.build_workload(job)["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == constraint
    plain = JobBuilder().replicas(2).job()
    assert not gang.workload_matches(gang.build_workload(plain), job)  # adding a topology recreates it


@pytest.mark.parametrize("pod_group", ["train-gang-3", None], ids=["gang", "no-gang"])
def test_topology_key_is_also_a_required_pod_affinity_on_this_generation(pod_group):
    user_term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
    job = (JobBuilder().replicas(2).set("placement", {"topologyKey": "dpjob.io/rack"})
           .set("template.spec.affinity", {"podAffinity": {
               "requiredDuringSchedulingIgnoredDuringExecution": [user_term]}}).job())
    spec = build_rank_pod(job, 1, 3, DEFAULT_POOLS["gpu"], pod_group=pod_group)["spec"]
    assert spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        user_term,
        {"labelSelector": {"matchLabels": {"dpjob.io/job-name": "train", "dpjob.io/restart": "3"}},
         "topologyKey": "dpjob.io/rack"}]
    assert "affinity" not in build_rank_pod(JobBuilder().replicas(2).job(), 1, 3, DEFAULT_POOLS["gpu"])["spec"]


def test_jobs_waiting_for_nodes_metric_counts_live_jobs_by_reason():
    from dpjob_operator.metrics import JobsUnschedulable

    def waiting(reason, phase="Created"):
        return {"phase": phase, "conditions": [{"type": "PodsScheduled", "status": "False", "reason": reason}]}

    statuses = [waiting("GangUnschedulable"), waiting("GangUnschedulable"), waiting("Unschedulable"),
                waiting("GangUnschedulable", "Failed"), {"phase": "Running", "conditions": [
                    {"type": "PodsScheduled", "status": "True", "reason": "Scheduled"}]}]
    (family,) = JobsUnschedulable(lambda: statuses).collect()
    assert {s.labels["reason"]: s.value for s in family.samples} == {"GangUnschedulable": 2, "Unschedulable": 1}
    (empty,) = JobsUnschedulable(lambda: []).collect()
    assert {s.labels["reason"]: s.value for s in empty.samples} == {"GangUnschedulable": 0, "Unschedulable": 0}


def test_a_gang_started_without_a_pod_group_is_completed_without_one():
    """Gang scheduling became available (operator restart) while ranks 0 and 1 of 3 already exist:
    rank 2 must not join a PodGroup of 3 that only it would ever belong to."""
    p = plan(JobBuilder().replicas(3), {"phase": "Pending", "restarts": 0},
             [pod(0, "Pending", node=None), pod(1, "Pending", node=None)], GangObservation(3))
    assert CreatePods((2,), 0, None) in p.actions
    assert not [a for a in p.actions if isinstance(a, EnsureGang)] and "gang" not in p.status


def test_a_gang_started_with_a_pod_group_keeps_it_even_if_the_job_now_disables_gangs():
    status = {"phase": "Pending", "restarts": 0, "gang": {"podGroup": "train-gang-0", "minCount": 3}}
    ranks = [pod(i, "Pending", node=None, pod_group="train-gang-0") for i in (0, 1)]
    p = plan(JobBuilder().replicas(3).run_policy(gangScheduling="Disabled"), status, ranks, None)
    assert CreatePods((2,), 0, "train-gang-0") in p.actions
    assert ReleaseGang() not in p.actions and p.status["gang"]["podGroup"] == "train-gang-0"


def test_pod_observation_reads_the_pod_group():
    from dpjob_operator.api.observed import observe_pod

    seen = observe_pod({"metadata": {"name": "train-rank-0", "labels": {"dpjob.io/rank": "0"}},
                        "spec": {"schedulingGroup": {"podGroupName": "train-gang-0"}}})
    assert seen.pod_group == "train-gang-0"


def test_success_releases_the_gang_in_the_same_pass():
    status = {"phase": "Running", "restarts": 0, "gang": {"podGroup": "train-gang-0", "minCount": 2}}
    p = plan(JobBuilder().replicas(2), status, [pod(0, "Succeeded"), pod(1, "Succeeded")], GangObservation(2))
    assert p.status["phase"] == "Succeeded" and "gang" not in p.status and ReleaseGang() in p.actions
