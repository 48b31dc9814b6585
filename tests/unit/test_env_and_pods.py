"""The environment contract and the rank pod shape, table-driven (design section 4)."""

from __future__ import annotations

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.builders.env import build_rank_env
from dpjob_operator.builders.pods import build_headless_service, build_rank_pod
from dpjob_operator.builders.shared_env import PER_RANK, shared_env
from tests.support.builders import JobBuilder
from tests.support.podenv import rank_env

pytestmark = pytest.mark.unit
MASTER = "train-rank-0.train.ns.svc.cluster.local"


def env_of(job, index=0, restart=0):
    return dict(build_rank_env(job, index, restart, DEFAULT_POOLS[job.spec.accelerator]))


@pytest.mark.parametrize("builder, index, expected, absent", [
    (JobBuilder().replicas(4), 2,
     {"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": MASTER,
      "MASTER_PORT": "29500", "PET_NNODES": "4", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "2",
      "PET_MASTER_ADDR": MASTER, "DPJOB_BACKEND": "gloo", "RANK_TABLE_FILE": "/etc/dpjob/ranktable/ranktable.json"},
     {"PET_RDZV_ENDPOINT"}),
    (JobBuilder().replicas(4).procs(8).accelerator("gpu"), 3,
     {"WORLD_SIZE": "32", "PET_NNODES": "4", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "3",
      "DPJOB_BACKEND": "nccl", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
     {"RANK", "LOCAL_RANK", "PET_N_PROC_PER_NODE"}),
    (JobBuilder().replicas(3).elastic(2, 5), 1,
     {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": f"{MASTER}:29500", "PET_NNODES": "2:5",
      "PET_RDZV_ID": "uid-train", "PET_MAX_RESTARTS": "3", "PET_NPROC_PER_NODE": "1"},
     {"RANK", "WORLD_SIZE", "PET_NODE_RANK", "MASTER_ADDR"}),
    (JobBuilder().replicas(2).procs(8).accelerator("npu"), 1,
     {"DPJOB_BACKEND": "hccl", "RANK_TABLE_FILE": "/etc/dpjob/ranktable/hccl.json", "HCCL_CONNECT_TIMEOUT": "600",
      "WORLD_SIZE": "16"}, {"RANK"}),
    (JobBuilder().replicas(2).procs(8).accelerator("npu").framework("mindspore"), 0,
     {"MS_ROLE": "MS_WORKER", "MS_SCHED_HOST": MASTER, "MS_SCHED_PORT": "29500", "MS_WORKER_NUM": "16",
      "MS_LOCAL_WORKER": "8", "MS_NODE_RANK": "0", "DPJOB_MS_SCHEDULER": "1"}, {"MS_NODE_ID"}),
    (JobBuilder().replicas(2).accelerator("gpu").framework("oneflow"), 1,
     {"MASTER_ADDR": MASTER, "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0"},
     {"PET_NNODES"}),
    (JobBuilder().replicas(2).procs(4).accelerator("gpu").framework("oneflow"), 1,
     {"DPJOB_NODE_RANK": "1", "DPJOB_NPROC_PER_NODE": "4"},
     {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"}),  # OneFlow: all five or none
    (JobBuilder().set("rankTable", {"format": "none"}), 0, {"WORLD_SIZE": "2"}, {"RANK_TABLE_FILE"}),
    (JobBuilder().accelerator("npu").procs(8).set("rankTable", {"mindxCompatible": True}), 0,
     {"RANK_TABLE_FILE": "/user/serverid/devindex/config/hccl.json"}, set()),
    (JobBuilder().set("rendezvous", {"port": 23456}), 0, {"MASTER_PORT": "23456", "PET_MASTER_PORT": "23456"},
     set()),
], ids=["cpu-static", "gpu-8procs", "elastic", "npu", "mindspore", "oneflow-1proc", "oneflow-multiproc",
        "no-ranktable", "mindx-path", "custom-port"])
def test_rank_env(builder, index, expected, absent):
    env = env_of(builder.job(), index)
    for name, value in expected.items():
        assert env.get(name) == value, f"{name}: expected {value!r}, got {env.get(name)!r}"
    assert not absent & env.keys(), f"must not be set: {absent & env.keys()}"


def test_restart_count_is_exported():
    assert env_of(JobBuilder().job(), 0, restart=3)["DPJOB_RESTART_COUNT"] == "3"


def test_user_env_wins_and_comes_after_ours():
    job = JobBuilder().user_env(MASTER_PORT="1234", EXTRA="$(WORLD_SIZE)").job()
    pod = build_rank_pod(job, 0, 0, DEFAULT_POOLS["cpu"])
    env = pod["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env].count("MASTER_PORT") == 1
    seen = rank_env(pod, job, DEFAULT_POOLS["cpu"])  # the kubelet: envFrom first, then env (which wins)
    assert seen["MASTER_PORT"] == "1234"
    assert seen["EXTRA"] == "2"  # $(WORLD_SIZE) expanded from the shared map


def test_a_rank_pod_carries_its_own_variables_and_takes_the_shared_ones_from_the_jobs_map():
    job = JobBuilder().replicas(4).job()
    pod = build_rank_pod(job, 2, 1, DEFAULT_POOLS["cpu"])
    trainer = pod["spec"]["containers"][0]
    assert {e["name"]: e["value"] for e in trainer["env"]} == {
        "DPJOB_NODE_RANK": "2", "DPJOB_RESTART_COUNT": "1", "PET_NODE_RANK": "2", "RANK": "2"}
    assert trainer["envFrom"] == [{"configMapRef": {"name": "train-env"}}]
    assert rank_env(pod, job, DEFAULT_POOLS["cpu"]) == env_of(job, 2, 1)  # nothing lost on the way


def test_the_jobs_map_goes_after_the_users_own_sources_so_that_ours_win_as_inline_variables_did():
    builder = JobBuilder()
    builder._trainer()["envFrom"] = [{"configMapRef": {"name": "mine"}}, {"configMapRef": {"name": "train-env"}}]
    trainer = build_rank_pod(builder.job(), 0, 0, DEFAULT_POOLS["cpu"])["spec"]["containers"][0]
    assert trainer["envFrom"] == [{"configMapRef": {"name": "mine"}}, {"configMapRef": {"name": "train-env"}}]


@pytest.mark.parametrize("builder", [
    JobBuilder().replicas(3),
    JobBuilder().replicas(3).accelerator("gpu").procs(8),
    JobBuilder().replicas(3).elastic(2, 4),
    JobBuilder().replicas(3).framework("oneflow"),
    JobBuilder().replicas(3).framework("mindspore"),
    JobBuilder().replicas(3).framework("mindspore").accelerator("npu").procs(8),
    JobBuilder().replicas(3).run_policy(stragglerFactor=2.5),
], ids=["cpu", "gpu-8", "elastic", "oneflow", "mindspore", "mindspore-npu-8", "straggler"])
def test_every_variable_in_the_shared_map_is_the_same_for_every_rank_and_generation(builder):
    job = builder.job()
    shared = shared_env(job, DEFAULT_POOLS[job.spec.accelerator])
    for index in range(3):
        for restart in (0, 1):
            env = env_of(job, index, restart)
            assert {name: env[name] for name in shared} == shared, (index, restart)
            assert set(env) - set(shared) <= PER_RANK


@pytest.mark.parametrize("accelerator, resource, selector, toleration_key", [
    ("gpu", "nvidia.com/gpu", {"nvidia.com/gpu.present": "true"}, "nvidia.com/gpu"),
    ("npu", "huawei.com/Ascend910", {"accelerator": "huawei-Ascend910"}, "huawei.com/Ascend910"),
    ("cpu", None, None, None),
])
def test_rank_pod_lands_on_its_pool(accelerator, resource, selector, toleration_key):
    job = JobBuilder().accelerator(accelerator).procs(8 if accelerator != "cpu" else 1).job()
    pod = build_rank_pod(job, 1, 2, DEFAULT_POOLS[accelerator])
    spec = pod["spec"]
    trainer = spec["containers"][0]
    assert pod["metadata"]["name"] == "train-rank-1"
    assert pod["metadata"]["labels"] == {"dpjob.io/job-name": "train", "dpjob.io/rank": "1", "dpjob.io/restart": "2",
                                         "app.kubernetes.io/managed-by": "dpjob-operator"}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-train"
    assert spec["hostname"] == "train-rank-1" and spec["subdomain"] == "train"
    assert spec["restartPolicy"] == "Never"
    assert spec.get("nodeSelector") == selector
    if resource:
        assert trainer["resources"]["limits"][resource] == "8"
        assert trainer["resources"]["requests"][resource] == "8"
        assert any(t["key"] == toleration_key for t in spec["tolerations"])
    else:
        assert "resources" not in trainer and "tolerations" not in spec
    assert {"name": "rendezvous", "containerPort": 29500, "protocol": "TCP"} in trainer["ports"]
    assert {"name": "dpjob-ranktable", "mountPath": "/etc/dpjob/ranktable", "readOnly": True} in trainer["volumeMounts"]


def test_sidecars_get_env_only_when_asked():
    body = JobBuilder().served()
    body["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    from dpjob_operator.api.spec import parse_job

    pod = build_rank_pod(parse_job(body), 0, 0, DEFAULT_POOLS["cpu"])
    assert "env" not in pod["spec"]["containers"][1]
    body["spec"]["injectEnvInto"] = "all"
    pod = build_rank_pod(parse_job(body), 0, 0, DEFAULT_POOLS["cpu"])
    assert "WORLD_SIZE" in rank_env(pod, parse_job(body), DEFAULT_POOLS["cpu"], "sidecar")


def test_pod_is_deterministic():
    job = JobBuilder().accelerator("gpu").procs(8).job()
    assert build_rank_pod(job, 3, 1, DEFAULT_POOLS["gpu"]) == build_rank_pod(job, 3, 1, DEFAULT_POOLS["gpu"])


def test_headless_service_publishes_not_ready_addresses():
    svc = build_headless_service(JobBuilder().job())
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["metadata"]["name"] == "train"
    assert svc["spec"]["selector"] == {"dpjob.io/job-name": "train", "app.kubernetes.io/managed-by": "dpjob-operator",
                                       "dpjob.io/rank": "0"}
