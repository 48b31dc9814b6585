"""Restart in place: the rules and counter a rank pod carries, the strategy a job resolves to, and the
books the planner keeps of restarts the kubelet made (table-driven, no cluster)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.observed import observe_pod
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.restart_counter import RUN_DIR, previous_exit
from dpjob_operator.api.timestamps import iso
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.builders.restart_rules import COUNTER_SCRIPT, apply_in_place, restart_rules
from dpjob_operator.k8s.inplace_probe import keeps_restart_rules, probe_pod
from dpjob_operator.reconcile.actions import CreatePods, DeletePods
from dpjob_operator.reconcile.inplace import FOLLOW_SECONDS, resolve_strategy
from dpjob_operator.reconcile.planner import plan_job
from tests.support.builders import JobBuilder, pod

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)
CPU = DEFAULT_POOLS["cpu"]


def running_status(**extra):
    return {"phase": "Running", "restarts": 0, "failureRestarts": 0, "restartStrategy": "InPlace",
            "startTime": iso(NOW - timedelta(minutes=5)), **extra}


def plan(builder, status, pods, now=NOW, served=True):
    return plan_job(builder.job(), status, list(pods), now, CPU, in_place_served=served)


# ---- the pod ---------------------------------------------------------------------------------

@pytest.mark.parametrize("policy, operator, values", [
    ("OnFailure", "NotIn", [0]),
    ("ExitCode", "In", [75, *range(128, 256)]),
])
def test_restart_rules_follow_the_jobs_retriable_exit_codes(policy, operator, values):
    assert restart_rules(policy) == [{"action": "RestartAllContainers",
                                      "exitCodes": {"operator": operator, "values": values}}]


def test_an_in_place_rank_pod_carries_rules_counter_and_run_directory():
    job = JobBuilder().replicas(2).job()
    body = build_rank_pod(job, 1, 0, CPU, in_place=True)
    spec = body["spec"]
    trainer = next(ct for ct in spec["containers"] if ct["name"] == "trainer")
    assert spec["restartPolicy"] == "Never" and trainer["restartPolicy"] == "Never"
    assert trainer["restartPolicyRules"][0]["action"] == "RestartAllContainers"
    assert {"name": "DPJOB_RESTART_COUNT_FILE", "value": f"{RUN_DIR}/restart-count"} in trainer["env"]
    counter = spec["initContainers"][0]
    assert counter["name"] == "dpjob-restart-count" and counter["image"] == trainer["image"]
    assert {"name": "dpjob-run", "mountPath": RUN_DIR} in trainer["volumeMounts"]
    assert {"name": "dpjob-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in spec["volumes"]
    assert "restartPolicyRules" not in build_rank_pod(job, 1, 0, CPU)["spec"]["containers"][0]


def test_the_counter_asks_for_the_trainers_cpu_memory_and_security_but_no_devices():
    spec = {"containers": [{"name": "trainer", "image": "img", "imagePullPolicy": "IfNotPresent",
                            "securityContext": {"runAsUser": 10001},
                            "resources": {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "8"},
                                          "requests": {"nvidia.com/gpu": "8"}}}],
            "initContainers": [{"name": "user-init", "image": "x"}]}
    apply_in_place(spec, "OnFailure", 3)
    apply_in_place(spec, "OnFailure", 3)  # idempotent: one counter, one rule, one volume
    counter = spec["initContainers"][0]
    assert [ct["name"] for ct in spec["initContainers"]] == ["dpjob-restart-count", "user-init"]
    assert counter["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}}
    assert counter["securityContext"] == {"runAsUser": 10001} and counter["imagePullPolicy"] == "IfNotPresent"
    assert len(spec["containers"][0]["restartPolicyRules"]) == 1 and len(spec["volumes"]) == 1


@pytest.mark.parametrize("files, count, message", [
    ({}, "0", ""),                                                # first start: nothing to say
    ({"restart-count": "0", "trainer-exit": "75"}, "1", "previous exit: 75"),
    ({"restart-count": "1", "trainer-running": ""}, "2", "previous exit: 137"),  # killed: no record
    ({"restart-count": "0"}, "1", "previous exit: unknown"),      # a script that records nothing
])
def test_the_counter_script_counts_and_reports_the_previous_exit_in_a_real_shell(tmp_path, files, count, message):
    run, log = tmp_path / "run", tmp_path / "termination-log"
    run.mkdir()
    for name, text in files.items():
        (run / name).write_text(text)
    script = COUNTER_SCRIPT.replace(RUN_DIR, str(run)).replace("/dev/termination-log", str(log))
    subprocess.run(["sh", "-c", script], check=True, timeout=60)
    assert (run / "restart-count").read_text().strip() == count
    assert (log.read_text().strip() if log.exists() else "") == message
    assert not (run / "trainer-exit").exists() and not (run / "trainer-running").exists()
    assert previous_exit(message or None) == (int(message.split(": ")[1]) if message[-1:].isdigit() else None)


def test_an_observed_pod_reports_its_restarts_in_place_and_the_previous_exit():
    body = {"metadata": {"name": "train-rank-1", "uid": "u", "labels": {"dpjob.io/rank": "1", "dpjob.io/restart": "2"}},
            "status": {"phase": "Running",
                       "containerStatuses": [{"name": "trainer", "restartCount": 3, "lastState": {"terminated": {
                           "exitCode": 137, "reason": "RestartingAllContainers"}}}],
                       "initContainerStatuses": [{"name": "dpjob-restart-count", "state": {"terminated": {
                           "exitCode": 0, "message": "previous exit: 137\n"}}}]}}
    seen = observe_pod(body)
    assert seen is not None and (seen.in_place, seen.in_place_exit, seen.gang_generation) == (3, 137, 5)


def test_the_probe_pod_passes_when_the_server_keeps_the_rule_and_fails_when_it_drops_it():
    sent = probe_pod("dpjob-system")
    assert keeps_restart_rules(sent)
    dropped = {"spec": {"containers": [{k: v for k, v in sent["spec"]["containers"][0].items()
                                        if k != "restartPolicyRules"}]}}
    assert not keeps_restart_rules(dropped)


# ---- the strategy ----------------------------------------------------------------------------

@pytest.mark.parametrize("asked, policy, mode, served, want", [
    ("Auto", "OnFailure", "static", True, "InPlace"),
    ("Auto", "OnFailure", "static+backoff0", True, "Recreate"),
    ("Auto", "OnFailure", "static", False, "Recreate"),
    ("Auto", "Never", "static", True, "Recreate"),
    ("Auto", "ExitCode", "elastic", True, "Recreate"),
    ("InPlace", "ExitCode", "static", True, "InPlace"),
    ("Recreate", "OnFailure", "static", True, "Recreate"),
])
def test_the_strategy_a_job_resolves_to(asked, policy, mode, served, want):
    builder = JobBuilder().run_policy(restartPolicy=policy, restartStrategy=asked)
    if mode == "elastic":
        builder = builder.elastic(1, 2)
    if mode.endswith("backoff0"):
        builder = builder.run_policy(backoffLimit=0)
    assert resolve_strategy(builder.job(), served)[0] == want


def test_asking_for_in_place_on_a_cluster_without_it_runs_recreate_and_says_why():
    p = plan_job(JobBuilder().run_policy(restartStrategy="InPlace").job(), {}, [], NOW, CPU, in_place_served=False)
    assert p.status["restartStrategy"] == "Recreate"
    assert [e.reason for e in p.events if e.type == "Warning"] == ["InPlaceUnavailable"]


def test_a_new_in_place_job_creates_pods_that_restart_in_place():
    p = plan_job(JobBuilder().replicas(2).job(), {}, [], NOW, CPU, in_place_served=True)
    assert p.status["restartStrategy"] == "InPlace"
    assert CreatePods((0, 1), 0, in_place=True) in p.actions


# ---- the books -------------------------------------------------------------------------------

def restarted(index, exit_code, count=1, phase="Running", label=0):
    return pod(index, phase, restart=label, in_place=count, in_place_exit=exit_code)


def test_a_rank_restarted_in_place_is_counted_blamed_and_nothing_is_deleted_or_created():
    p = plan(JobBuilder().replicas(2), running_status(), [restarted(0, 75, phase="Pending"), restarted(1, 137)])
    s = p.status
    assert (s["restarts"], s["recreatedAt"], s["failureRestarts"]) == (1, 0, 1)
    assert s["restartsByStrategy"] == {"InPlace": 1} and s["restartsByReason"] == {"RankFailed": 1}
    assert s["lastRestart"]["strategy"] == "InPlace" and s["lastRestart"]["restart"] == 1
    assert (s["lastFailure"]["rank"], s["lastFailure"]["exitCode"], s["lastFailure"]["restart"]) == (1, 137, 0)
    assert s["phase"] == "Restarting"
    assert not [a for a in p.actions if isinstance(a, DeletePods | CreatePods)]
    assert {"RankFailed", "GangRestart"} <= {e.reason for e in p.events}


def test_the_gang_is_running_again_only_when_every_rank_runs_the_new_generation():
    status = running_status(phase="Restarting", restarts=1, recreatedAt=0, failureRestarts=1)
    waiting = plan(JobBuilder().replicas(2), status, [restarted(0, 75), pod(1, "Running")])
    assert waiting.status["phase"] == "Restarting"
    back = plan(JobBuilder().replicas(2), status, [restarted(0, 75), restarted(1, 137)])
    assert back.status["phase"] == "Running" and not [a for a in back.actions if isinstance(a, DeletePods)]


def test_a_better_culprit_replaces_a_bystander_once_its_record_arrives():
    status = running_status(phase="Restarting", restarts=1, recreatedAt=0, failureRestarts=1,
                            lastRestart={"restart": 1, "strategy": "InPlace", "reason": "RankFailed", "time": iso(NOW)},
                            lastFailure={"rank": 0, "exitCode": 75, "restart": 0})
    p = plan(JobBuilder().replicas(2), status, [restarted(0, 75), restarted(1, 137, phase="Pending")])
    assert (p.status["lastFailure"]["rank"], p.status["lastFailure"]["exitCode"]) == (1, 137)


def test_an_in_place_restart_past_the_budget_fails_the_job_and_stops_its_pods():
    builder = JobBuilder().replicas(2).run_policy(backoffLimit=1)
    status = running_status(restarts=1, recreatedAt=0, failureRestarts=1)
    p = plan(builder, status, [restarted(0, 75, count=2), restarted(1, 137, count=2)])
    assert p.status["phase"] == "Failed" and p.status["reason"] == "BackoffLimitExceeded"
    assert sorted(n for a in p.actions if isinstance(a, DeletePods) for n in a.names) == [
        "train-rank-0", "train-rank-1"]


def test_a_rank_that_does_not_follow_in_time_recreates_the_gang_uncharged():
    last = {"restart": 1, "strategy": "InPlace", "reason": "RankFailed", "time": iso(NOW)}
    status = running_status(phase="Restarting", restarts=1, recreatedAt=0, failureRestarts=1, lastRestart=last)
    pods = [restarted(0, 137), pod(1, "Running")]
    soon = plan(JobBuilder().replicas(2), status, pods, now=NOW + timedelta(seconds=5))
    assert not [a for a in soon.actions if isinstance(a, DeletePods)] and soon.wake_after is not None
    late = plan(JobBuilder().replicas(2), status, pods, now=NOW + timedelta(seconds=FOLLOW_SECONDS + 1))
    s = late.status
    assert (s["restarts"], s["failureRestarts"], "recreatedAt" in s) == (2, 1, False)
    assert s["restartsByStrategy"] == {"Recreate": 1} and s["lastRestart"]["reason"] == "NotRestartedInPlace"
    assert sorted(n for a in late.actions if isinstance(a, DeletePods) for n in a.names) == [
        "train-rank-0", "train-rank-1"]


UNMATCHED = ("0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) didn't "
             "match Pod's required features. preemption: 0/3 nodes are available: 3 Preemption is not helpful.")


@pytest.mark.parametrize("why, falls_back", [
    (UNMATCHED, True),   # the pool's kubelets do not declare RestartAllContainersOnContainerExits
    ("0/3 nodes are available: 3 Insufficient cpu.", False),  # waits like any pod
    (None, False),
])
def test_pods_no_kubelet_can_restart_in_place_make_the_job_recreate_them_without_rules(why, falls_back):
    status = running_status(phase="Pending", reason="Accepted")
    p = plan(JobBuilder().replicas(2), status, [pod(0, "Pending", unschedulable=why), pod(1, "Pending")])
    s = p.job_status
    assert (s.restart_strategy == "Recreate") is falls_back
    if falls_back:
        assert (s.restarts, s.failure_restarts, s.restarts_by_reason) == (1, 0, {"InPlaceUnavailable": 1})
        assert sorted(n for a in p.actions if isinstance(a, DeletePods) for n in a.names) == [
            "train-rank-0", "train-rank-1"]
        warning = next(e for e in p.events if e.reason == "InPlaceUnavailable")
        assert "RestartAllContainersOnContainerExits" in warning.message and "rank 0" in warning.message
        created = [a for a in plan(JobBuilder().replicas(2), p.status, []).actions if isinstance(a, CreatePods)]
        assert created and not any(a.in_place for a in created)


def test_after_in_place_restarts_the_pods_of_the_gang_are_current_not_stale():
    status = running_status(restarts=2, recreatedAt=0, failureRestarts=2)
    p = plan(JobBuilder().replicas(2), status, [restarted(0, 75, count=2), restarted(1, 137, count=2)])
    assert p.status["phase"] == "Running" and not [a for a in p.actions if isinstance(a, DeletePods | CreatePods)]


def test_a_recreate_restart_is_recorded_by_strategy_too():
    status = {"phase": "Running", "restarts": 0, "failureRestarts": 0, "restartStrategy": "Recreate"}
    p = plan(JobBuilder().replicas(2), status, [pod(0, "Failed", exit_code=1), pod(1)], served=False)
    assert p.status["restartsByStrategy"] == {"Recreate": 1}
    assert p.status["lastRestart"]["strategy"] == "Recreate" and p.status["restarts"] == 1


def test_the_operator_counts_restarts_by_strategy_and_times_the_recovery():
    from dpjob_operator import metrics
    from dpjob_operator.controller.timings import Timings

    def sample(name, strategy):
        return metrics.REGISTRY.get_sample_value(name, {"strategy": strategy}) or 0.0

    timings, job = Timings(), JobBuilder().replicas(2).job()
    counted = plan(JobBuilder().replicas(2), running_status(), [restarted(0, 75), restarted(1, 137, phase="Pending")])
    restarts, recoveries = sample("dpjob_restarts_by_strategy_total", "InPlace"), \
        sample("dpjob_gang_recovery_seconds_count", "InPlace")
    timings.observe_pass(job, running_status(), counted)
    back = plan(JobBuilder().replicas(2), counted.status, [restarted(0, 75), restarted(1, 137)])
    timings.observe_pass(job, counted.status, back)
    assert back.status["phase"] == "Running"
    assert sample("dpjob_restarts_by_strategy_total", "InPlace") == restarts + 1
    assert sample("dpjob_gang_recovery_seconds_count", "InPlace") == recoveries + 1


@pytest.mark.parametrize("before, after, kept", [
    # the kubelet's report of the real exit, then its RestartingAllContainers one: the real one stays
    ({"exit_code": 3, "reason": "Error", "message": "Traceback ... ZeroDivisionError", "in_place": 0},
     {"exit_code": 137, "reason": "RestartingAllContainers", "in_place": 1}, True),
    # carried already: later updates keep it
    ({"exit_code": 3, "reason": "Error", "message": "Traceback", "in_place": 1},
     {"exit_code": 137, "reason": "RestartingAllContainers", "in_place": 1}, True),
    # a newer real termination is never overwritten
    ({"exit_code": 3, "reason": "Error", "in_place": 0}, {"exit_code": 1, "reason": "Error", "in_place": 1}, False),
    # nothing better known before
    ({"exit_code": 137, "reason": "RestartingAllContainers", "in_place": 0},
     {"exit_code": 137, "reason": "RestartingAllContainers", "in_place": 1}, False),
    # an older run's termination is not this run's
    ({"exit_code": 3, "reason": "Error", "in_place": 0},
     {"exit_code": 137, "reason": "RestartingAllContainers", "in_place": 2}, False),
])
def test_the_pod_cache_keeps_the_real_termination_across_the_kubelets_restart(before, after, kept):
    from dpjob_operator.api.inplace_cause import carry_cause

    old, new = pod(1, "Running", **before), pod(1, "Pending", **after)
    carried = carry_cause(old, new)
    assert (carried.exit_code, carried.reason) == ((old.exit_code, old.reason) if kept else (new.exit_code, new.reason))


def test_a_seen_traceback_names_the_cause_of_a_script_restarted_in_place():
    victim = pod(1, "Pending", in_place=1, exit_code=3, reason="Error", message="ZeroDivisionError: division by zero",
                 finished_at="2026-11-27T11:59:58Z")
    bystander = pod(0, "Pending", in_place=1, exit_code=1, reason="Error", message="gloo: connection reset",
                    finished_at="2026-11-27T11:59:59Z")
    p = plan(JobBuilder().replicas(2), running_status(), [bystander, victim])
    failure = p.status["lastFailure"]
    assert (failure["rank"], failure["exitCode"], failure["reason"]) == (1, 3, "Error")
    assert failure["message"].endswith("ZeroDivisionError: division by zero")
