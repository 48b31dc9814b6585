"""The operator as a process against the real control plane: pods on the right pool with the
right environment, truthful status, gang restarts, lifecycle policies and cleanup."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl, wait_pods
from tests.support.kwok import fail_pod
from tests.support.paths import REPO, example_files
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


def pool_of(core, pod) -> str:
    return core.read_node(pod.spec.node_name).metadata.labels.get("dpjob.io/pool", "")


# What each example must give, independently of the operator's code: (pool, replicas, world size,
# (device resource, limit per rank)). Examples are found by glob: one missing here still runs, held
# to what its own YAML states (pool = accelerator, replicas).
EXPECTED = {
    "quickstart-cpu.yaml": ("cpu", 2, 2, None),
    "gpu-ddp.yaml": ("gpu", 4, 32, ("nvidia.com/gpu", "8")),
    "npu-ddp.yaml": ("npu", 2, 16, ("huawei.com/Ascend910", "8")),
    "elastic-cpu.yaml": ("cpu", 3, None, None),
    "mindspore-npu.yaml": ("npu", 2, 16, ("huawei.com/Ascend910", "8")),
    "mindspore-cpu.yaml": ("cpu", 2, 2, None),
    "oneflow-gpu.yaml": ("gpu", 2, 2, ("nvidia.com/gpu", "1")),
}


def published_hostnames(namespace: str, service: str) -> list[str]:
    """Hostnames in the Service's EndpointSlices: the ``<host>.<service>`` names cluster DNS answers."""
    out = kubectl("get", "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}",
                  "-o", "json").stdout
    return sorted(e.get("hostname", "") for s in json.loads(out)["items"] for e in s.get("endpoints") or [])


def test_every_rank_is_published_when_the_job_asks(api, namespace, operator):
    dpj.create(api, namespace, JobBuilder("hosts").replicas(3).update_spec(
        {"rendezvous": {"dnsRecords": "allRanks"}}).obj())
    wait_until(lambda: published_hostnames(namespace, "hosts") == [f"hosts-rank-{i}" for i in range(3)],
               timeout=60, what="the Service hosts to publish all three ranks")


def expected(example: Path, manifest: dict) -> tuple:
    spec = manifest["spec"]
    return EXPECTED.get(example.name, (spec.get("accelerator", "cpu"), spec["replicas"], None, None))


def storage_of(example: Path) -> list[str]:
    """The examples/storage/ files the example's header says to apply first (its claims' volumes)."""
    header = "".join(line for line in example.read_text().splitlines(keepends=True) if line.startswith("#"))
    return sorted(set(re.findall(r"examples/storage/[\w.-]+\.yaml", header)))


@pytest.fixture
def example_storage(namespace, request) -> Iterator[None]:
    """Apply the storage the example's header names, in the test's namespace; afterwards delete the
    job, then that storage, waiting: its PersistentVolume is cluster-scoped and binds one claim, so
    it must be gone before the next example applies it again. One left Released by an interrupted
    run would bind no new claim: it is deleted first."""
    example = request.node.callspec.params["example"]
    storage = [str(REPO / ref) for ref in storage_of(example)]
    for path in storage:
        volumes = [d["metadata"]["name"] for d in yaml.safe_load_all(Path(path).read_text())
                   if d and d["kind"] == "PersistentVolume"]
        if volumes:
            kubectl("delete", "pv", *volumes, "--ignore-not-found", "--timeout=60s", check=False)
        out = kubectl("apply", "-n", namespace, "-f", path, check=False)
        assert out.returncode == 0, out.stderr
    yield
    if storage:
        kubectl("delete", "-n", namespace, "-f", str(example), "--cascade=foreground", "--timeout=120s", check=False)
    for path in storage:
        kubectl("delete", "-n", namespace, "-f", path, "--ignore-not-found", "--timeout=120s")


@pytest.mark.parametrize("example", example_files(), ids=lambda p: p.name)
def test_example_runs_on_the_right_pool_with_the_right_env(api, core, namespace, operator, example_storage,
                                                            example: Path):
    manifest = yaml.safe_load(example.read_text())
    pool, replicas, world, device = expected(example, manifest)
    out = dpj.apply_file(namespace, example)
    assert out.returncode == 0, out.stderr
    name = manifest["metadata"]["name"]
    pods = wait_pods(core, namespace, name, replicas)
    st = dpj.wait_phase(api, namespace, name, "Running")
    assert st["ready"] == f"{replicas}/{replicas}" and st["readyReplicas"] == replicas
    assert {pool_of(core, p) for p in pods} == {pool}
    for i, pod in enumerate(pods):
        env = dpj.env_of(pod)
        assert env["DPJOB_NAME"] == name and env["DPJOB_NODE_RANK"] == str(i)
        assert env["DPJOB_MASTER_ADDR"] == f"{name}-rank-0.{name}.{namespace}.svc.cluster.local"
        if world is not None:
            assert st["worldSize"] == world
        if device:
            limits = next(c for c in pod.spec.containers if c.name == "trainer").resources.limits
            assert limits[device[0]] == device[1]
    svc = core.read_namespaced_service(name, namespace)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses is True
    # kube-controller-manager's EndpointSlices: the DNS records CoreDNS serves, rank 0's alone by default
    published = replicas if (manifest["spec"].get("rendezvous") or {}).get("dnsRecords") == "allRanks" else 1
    wait_until(lambda: published_hostnames(namespace, name) == [f"{name}-rank-{i}" for i in range(published)],
               timeout=30, what=f"the Service {name} to publish {published} rank(s)")
    columns = kubectl("get", "dpj", name, "-n", namespace).stdout
    for header in ("PHASE", "READY", "WORLD", "ACCELERATOR", "RESTARTS", "AGE"):
        assert header in columns
    assert "Running" in columns


def test_success_path_and_events(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().completes_after("2s").obj())
    st = dpj.wait_phase(api, namespace, "train", "Succeeded")
    assert st["succeededReplicas"] == 2 and st["runningReplicas"] == 0 and st["completionTime"]
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Succeeded"]["status"] == "True" and conds["Running"]["status"] == "False"
    for reason in ("Accepted", "AllRanksRunning", "JobSucceeded"):
        dpj.wait_event(namespace, "train", reason)
    assert "JobSucceeded" in kubectl("describe", "dpj", "train", "-n", namespace).stdout


def test_a_job_another_controller_runs_is_left_alone(api, core, namespace, operator):
    """spec.managedBy naming another controller (Kueue's MultiKueue, a second install): no pods,
    no status, no events from this operator, while it runs its own job in the same namespace."""
    dpj.create(api, namespace, JobBuilder("theirs", namespace).set("managedBy", "example.com/other").obj())
    dpj.create(api, namespace, JobBuilder("ours", namespace).obj())
    wait_until(lambda: f"job {namespace}/theirs is run by example.com/other" in operator.log_text(), timeout=30,
               what="the operator's line about the job it leaves alone")
    wait_pods(core, namespace, "ours", 2)
    dpj.wait_event(namespace, "ours", "Accepted")
    assert "status" not in dpj.get(api, namespace, "theirs")
    assert dpj.rank_pods(core, namespace, "theirs") == [] and dpj.events(namespace, "theirs") == []


def test_failing_rank_restarts_the_gang(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().replicas(3).obj())
    old = wait_pods(core, namespace, "train", 3)
    dpj.wait_phase(api, namespace, "train", "Running")
    fail_pod(core, namespace, "train-rank-1", exit_code=137)
    new = wait_pods(core, namespace, "train", 3, restart=1)
    assert {p.metadata.uid for p in new}.isdisjoint({p.metadata.uid for p in old})
    st = dpj.wait_phase(api, namespace, "train", "Running")
    assert st["restarts"] == 1 and st["failureRestarts"] == 1 and st["restartsByReason"] == {"RankFailed": 1}
    assert st["lastFailure"]["rank"] == 1 and st["lastFailure"]["exitCode"] == 137
    assert all(dpj.env_of(p)["DPJOB_RESTART_COUNT"] == "1" for p in new)
    dpj.wait_event(namespace, "train", "GangRestart")


def _requests(operator, method: str, code: str | None = None) -> float:
    """The operator's own API calls of ``method`` (and status ``code``) so far."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for f in text_string_to_metric_families(operator.metrics()) for s in f.samples
               if s.name == "rest_client_requests_total" and s.labels["method"] == method
               and code in (None, s.labels["code"]))


def test_a_gang_restart_deletes_and_creates_each_rank_pod_once(api, core, namespace, operator):
    """Expectations, as the Job controller keeps them (issue 13): passes that act on a pod cache
    still trailing their own writes must not delete or create the same pod again. Before them a
    512-rank restart made 1,541 pod DELETEs and 1,044 POSTs (a 409 and a GET each)."""
    ranks = 48
    dpj.create(api, namespace, JobBuilder().replicas(ranks).obj())
    wait_pods(core, namespace, "train", ranks)
    dpj.wait_phase(api, namespace, "train", "Running", timeout=90)
    deletes, conflicts = _requests(operator, "DELETE"), _requests(operator, "POST", "409")
    fail_pod(core, namespace, "train-rank-0", exit_code=137)
    wait_pods(core, namespace, "train", ranks, restart=1)
    st = dpj.wait_status(api, namespace, "train", lambda s: s.get("phase") == "Running" and s.get("restarts") == 1,
                         timeout=120, what="the restarted gang Running")
    assert st["restartsByReason"] == {"RankFailed": 1}
    extra_deletes = _requests(operator, "DELETE") - deletes - ranks
    by_code = {code: _requests(operator, "DELETE", code) for code in ("200", "404", "409")}
    assert extra_deletes <= 1, f"{extra_deletes:.0f} DELETEs beyond one per pod (one is the old PodGroup): {by_code}"
    assert _requests(operator, "POST", "409") == conflicts, "a rank pod was POSTed again after it was created"


def test_backoff_limit_exhausted_fails_naming_rank_and_exit_code(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().fails_after("1s", exit_code=3).run_policy(backoffLimit=1).obj())
    st = dpj.wait_phase(api, namespace, "train", "Failed", timeout=90)
    assert st["reason"] == "BackoffLimitExceeded" and st["restarts"] == 1
    assert st["lastFailure"]["exitCode"] == 3 and st["lastFailure"]["pod"].startswith("train-rank-")
    assert "exit code 3" in st["message"]
    # cleanPodPolicy Running: nothing is left running, failed pods stay for their logs.
    pods = dpj.rank_pods(core, namespace, "train")
    assert pods and all(p.status.phase != "Running" for p in pods)


def test_exit_code_policy_fails_fast_on_a_permanent_error(api, namespace, operator):
    dpj.create(api, namespace, JobBuilder().fails_after("1s", exit_code=2)
               .run_policy(restartPolicy="ExitCode", backoffLimit=5).obj())
    st = dpj.wait_phase(api, namespace, "train", "Failed")
    assert st["reason"] == "PermanentError" and st["restarts"] == 0


def test_active_deadline(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().run_policy(activeDeadlineSeconds=3).obj())
    st = dpj.wait_phase(api, namespace, "train", "Failed", timeout=30)
    assert st["reason"] == "DeadlineExceeded"
    wait_until(lambda: not dpj.rank_pods(core, namespace, "train"), what="ranks stopped")


def test_ttl_deletes_the_finished_job_and_its_children(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().completes_after("1s").run_policy(ttlSecondsAfterFinished=2).obj())
    dpj.wait_phase(api, namespace, "train", "Succeeded")
    wait_until(lambda: "train" not in kubectl("get", "dpj", "-n", namespace, "-o", "name").stdout, timeout=30,
               what="job deleted by TTL")
    wait_until(lambda: not dpj.rank_pods(core, namespace, "train"), what="children collected")


def test_suspend_and_resume(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().obj())
    wait_pods(core, namespace, "train", 2)
    dpj.patch(api, namespace, "train", {"spec": {"runPolicy": {"suspend": True}}})
    st = dpj.wait_phase(api, namespace, "train", "Suspended")
    assert {c["type"]: c["status"] for c in st["conditions"]}["Suspended"] == "True"
    wait_until(lambda: not dpj.rank_pods(core, namespace, "train"), what="pods deleted on suspend")
    # activeDeadlineSeconds counts from the resume (Kueue may keep a job suspended for hours).
    assert "startTime" not in dpj.wait_status(api, namespace, "train", lambda s: "startTime" not in s,
                                              what="startTime cleared")
    resumed_at = datetime.now(UTC).replace(microsecond=0)
    dpj.patch(api, namespace, "train", {"spec": {"runPolicy": {"suspend": False}}})
    wait_pods(core, namespace, "train", 2)
    st = dpj.wait_phase(api, namespace, "train", "Running")
    assert {c["type"]: c["reason"] for c in st["conditions"]}["Suspended"] == "Resumed"
    assert datetime.strptime(st["startTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) >= resumed_at


def test_kueue_flavor_node_selector_set_while_suspended_reaches_the_pods(api, core, namespace, operator):
    """Kueue admits a suspended job by writing its flavor's nodeSelector into the template, then
    unsuspending it (pain point 13: PyTorchJob pods ignored it). The pods must carry both the
    flavor's labels and the pool's."""
    dpj.create(api, namespace, JobBuilder().accelerator("gpu").run_policy(suspend=True).obj())
    dpj.wait_phase(api, namespace, "train", "Suspended")
    flavor = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    dpj.patch(api, namespace, "train", {"spec": {"template": {"spec": {"nodeSelector": flavor}},
                                                 "runPolicy": {"suspend": False}}})
    pods = wait_pods(core, namespace, "train", 2)
    assert all(p.spec.node_selector == {"nvidia.com/gpu.present": "true", **flavor} for p in pods)
    assert {pool_of(core, p) for p in pods} == {"gpu"}


def test_deleting_the_job_removes_every_child(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().obj())
    wait_pods(core, namespace, "train", 2)
    wait_until(lambda: any(c.metadata.name == "train-ranktable"
                           for c in core.list_namespaced_config_map(namespace).items), what="ranktable configmap")
    kubectl("delete", "dpj", "train", "-n", namespace, "--wait=true", "--timeout=30s")
    wait_until(lambda: not dpj.rank_pods(core, namespace, "train"), what="pods gone")
    wait_until(lambda: not core.list_namespaced_service(namespace).items, what="service gone")
    wait_until(lambda: not [c for c in core.list_namespaced_config_map(namespace).items
                            if c.metadata.name.startswith("train")], what="configmap gone")


def test_kubectl_scale_restarts_a_static_gang_at_the_new_size(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().obj())
    wait_pods(core, namespace, "train", 2)
    dpj.wait_phase(api, namespace, "train", "Running")
    out = kubectl("scale", "dpj", "train", "-n", namespace, "--replicas=3")
    assert "scaled" in out.stdout
    pods = wait_pods(core, namespace, "train", 3, restart=1)
    assert all(dpj.env_of(p)["WORLD_SIZE"] == "3" for p in pods)
    st = dpj.wait_phase(api, namespace, "train", "Running")
    assert st["restartsByReason"] == {"Resized": 1} and st["failureRestarts"] == 0 and st["worldSize"] == 3


def test_unschedulable_ranks_are_reported(api, namespace, operator):
    body = JobBuilder().accelerator("gpu").procs(9).obj()
    dpj.create(api, namespace, body)
    # Gang-scheduled or not, the condition names the rank and the scheduler's reason.
    st = dpj.wait_status(api, namespace, "train", lambda s: any(
        c["type"] == "PodsScheduled" and c["status"] == "False" and "nvidia.com/gpu" in c["message"]
        for c in s.get("conditions", [])), what="PodsScheduled=False naming the scheduler's reason")
    cond = next(c for c in st["conditions"] if c["type"] == "PodsScheduled")
    assert "rank" in cond["message"] and cond["reason"] in ("Unschedulable", "GangUnschedulable")
    dpj.wait_event(namespace, "train", cond["reason"])


def test_operator_restart_resumes_without_duplicating_pods(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().replicas(4).obj())
    before = wait_pods(core, namespace, "train", 4)
    operator.restart()
    dpj.patch(api, namespace, "train", {"metadata": {"labels": {"poke": "1"}}})
    st = dpj.wait_phase(api, namespace, "train", "Running")
    after = dpj.rank_pods(core, namespace, "train")
    assert [p.metadata.uid for p in after] == [p.metadata.uid for p in before]
    assert st["restarts"] == 0


def test_npu_rank_table_completes_and_is_rewritten_after_a_restart(api, core, namespace, operator):
    body = JobBuilder().replicas(2).accelerator("npu").procs(8).obj()
    dpj.create(api, namespace, body)
    wait_pods(core, namespace, "train", 2)

    def table(restart):
        cm = core.read_namespaced_config_map("train-ranktable-hccl", namespace)  # one ConfigMap per file
        data = json.loads(cm.data.get("hccl.json", "{}"))
        st = dpj.status(api, namespace, "train").get("rankTable") or {}
        return data if data.get("status") == "completed" and st.get("restart") == restart and st.get("ready") else None

    hccl = wait_until(lambda: table(0), what="hccl.json completed")
    assert hccl["version"] == "1.0" and hccl["server_count"] == "2"
    ranks = [d["rank_id"] for s in hccl["server_list"] for d in s["device"]]
    assert ranks == [str(i) for i in range(16)]
    generic = json.loads(core.read_namespaced_config_map("train-ranktable", namespace).data["ranktable.json"])
    assert generic["status"] == "completed" and generic["worldSize"] == 16
    ips_before = sorted(s["container_ip"] for s in hccl["server_list"])
    pods = dpj.rank_pods(core, namespace, "train")
    assert dpj.env_of(pods[0])["RANK_TABLE_FILE"] == "/etc/dpjob/ranktable/hccl.json"
    fail_pod(core, namespace, "train-rank-0")
    hccl2 = wait_until(lambda: table(1), timeout=60, what="table of restart 1")
    ips_after = sorted(s["container_ip"] for s in hccl2["server_list"])
    assert ips_after != ips_before
    st = dpj.status(api, namespace, "train")
    assert {c["type"]: c["status"] for c in st["conditions"]}["RankTableReady"] == "True"


def test_cpu_and_gpu_jobs_get_the_generic_table(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder("gpujob").replicas(2).accelerator("gpu").procs(8).obj())
    wait_pods(core, namespace, "gpujob", 2)

    def generic():
        data = core.read_namespaced_config_map("gpujob-ranktable", namespace).data or {}
        table = json.loads(data.get("ranktable.json", "{}"))
        return table if table.get("status") == "completed" else None

    table = wait_until(generic, what="generic table")
    assert "hccl.json" not in core.read_namespaced_config_map("gpujob-ranktable", namespace).data
    ranks = [r["rank"] for s in table["servers"] for r in s["ranks"]]
    assert ranks == list(range(16))


def test_operator_metrics_report_reconciles_and_pods(operator):
    text = operator.metrics()
    for name in ("controller_runtime_reconcile_total", "controller_runtime_reconcile_time_seconds_bucket",
                 "workqueue_depth", "rest_client_requests_total", "dpjob_jobs{", "dpjob_pods_created_total",
                 "dpjob_time_to_all_pods_created_seconds_bucket"):
        assert name in text, name
    # controller-runtime's buckets (a p99 between 1 and 2.5 s is told apart) ...
    assert 'controller_runtime_reconcile_time_seconds_bucket{controller="dataparalleljob",le="1.25"}' in text
    # ... and no client-side token bucket by default: its histogram is declared, never observed.
    assert "# TYPE rest_client_rate_limiter_duration_seconds histogram" in text
    assert "rest_client_rate_limiter_duration_seconds_bucket" not in text


INVALID = [
    ("replicas-zero", {"replicas": 0}, "spec.replicas"),
    ("bad-accelerator", {"accelerator": "tpu"}, "spec.accelerator"),
    ("elastic-min-gt-max", {"replicas": 3, "rendezvous": {"mode": "elastic", "minReplicas": 4, "maxReplicas": 2}},
     "minReplicas"),
    ("elastic-missing-bounds", {"rendezvous": {"mode": "elastic"}}, "spec.rendezvous"),
    ("static-with-bounds", {"rendezvous": {"minReplicas": 1}}, "spec.rendezvous"),
    ("port-too-low", {"rendezvous": {"port": 80}}, "spec.rendezvous.port"),
    ("bad-dns-records", {"rendezvous": {"dnsRecords": "workers"}}, "spec.rendezvous.dnsRecords"),
    ("nccl-on-cpu", {"backend": "nccl"}, "spec.backend"),
    ("hccl-table-on-gpu", {"accelerator": "gpu", "rankTable": {"format": "hccl"}}, "spec.rankTable.format"),
    ("negative-backoff", {"runPolicy": {"backoffLimit": -1}}, "spec.runPolicy.backoffLimit"),
    ("bad-clean-policy", {"runPolicy": {"cleanPodPolicy": "Sometimes"}}, "spec.runPolicy.cleanPodPolicy"),
    ("bad-success-policy", {"successPolicy": "Majority"}, "spec.successPolicy"),
    ("no-trainer", {"template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}, "trainer"),
    ("oneflow-elastic", {"framework": "oneflow", "rendezvous": {"mode": "elastic", "minReplicas": 1,
                                                                "maxReplicas": 2}}, "spec.rendezvous.mode"),
    ("devices-on-cpu", {"devicesPerReplica": 2}, "spec.devicesPerReplica"),
    ("restart-policy-always", {"template": {"spec": {"restartPolicy": "Always", "containers": [
        {"name": "trainer", "image": "x"}]}}}, "restartPolicy"),
    ("bad-gang-policy", {"runPolicy": {"gangScheduling": "Volcano"}}, "spec.runPolicy.gangScheduling"),
    ("own-scheduling-group", {"template": {"spec": {"schedulingGroup": {"podGroupName": "mine"}, "containers": [
        {"name": "trainer", "image": "x"}]}}}, "schedulingGroup"),
    ("bad-topology-key", {"placement": {"topologyKey": "not a label key!"}}, "spec.placement.topologyKey"),
    ("managed-by-without-domain", {"managedBy": "my-controller"}, "spec.managedBy"),
]


@pytest.mark.parametrize("case, spec, field", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_spec_is_rejected_at_apply_naming_the_field(namespace, crds, case, spec, field):
    body = JobBuilder("bad").update_spec(spec).obj()
    out = kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(body), check=False)
    assert out.returncode != 0, f"{case} was accepted"
    assert field in out.stderr, out.stderr


def test_too_long_name_is_rejected(namespace, crds):
    body = JobBuilder("a" * 60).obj()
    out = kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(body), check=False)
    assert out.returncode != 0 and "metadata.name is too long" in out.stderr


def test_immutable_fields_cannot_change(api, namespace, crds):
    dpj.create(api, namespace, JobBuilder("frozen").obj())
    for patch, field in (({"accelerator": "gpu"}, "spec.accelerator"), ({"framework": "oneflow"}, "spec.framework"),
                         ({"procsPerReplica": 4}, "spec.procsPerReplica"),
                         ({"rendezvous": {"dnsRecords": "allRanks"}}, "spec.rendezvous.dnsRecords"),
                         ({"managedBy": "example.com/other"}, "spec.managedBy")):
        out = kubectl("patch", "dpj", "frozen", "-n", namespace, "--type=merge", "-p",
                      json.dumps({"spec": patch}), check=False)
        assert out.returncode != 0 and "immutable" in out.stderr and field in out.stderr, out.stderr
