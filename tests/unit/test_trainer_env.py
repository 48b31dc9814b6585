"""The trainer's reading of the environment contract: what runs, and what fails with which message."""

from __future__ import annotations

import pytest

from dpjob_trainer.env import EnvError, bound_device, device_for, parse_env, select_backend

pytestmark = pytest.mark.unit

DIST = {"WORLD_SIZE": "4", "RANK": "3", "MASTER_ADDR": "job-rank-0.job", "MASTER_PORT": "29500"}


def test_no_environment_means_a_single_process():
    env = parse_env({})
    assert (env.world_size, env.rank, env.local_rank, env.distributed) == (1, 0, 0, False)
    assert env.requested_backend is None and env.rank_table_file is None


def test_operator_contract_is_read_completely():
    env = parse_env({
        **DIST, "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "DPJOB_BACKEND": "GLOO", "DPJOB_NAME": "resnet",
        "DPJOB_RESTART_COUNT": "2", "RANK_TABLE_FILE": "/etc/dpjob/ranktable.json",
    })
    assert env.distributed and env.world_size == 4 and env.rank == 3
    assert (env.local_rank, env.local_world_size) == (1, 2)
    assert env.rendezvous_address == "job-rank-0.job:29500"
    assert env.requested_backend == "gloo" and env.job_name == "resnet" and env.restart_count == 2
    assert env.rank_table_file == "/etc/dpjob/ranktable.json" and not env.under_torchrun


def test_torchrun_environment_is_recognised_and_its_restart_count_used():
    env = parse_env({**DIST, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x",
                     "TORCHELASTIC_RESTART_COUNT": "5"})
    assert env.under_torchrun and env.restart_count == 5
    assert parse_env({**DIST, "TORCHELASTIC_RESTART_COUNT": "5", "DPJOB_RESTART_COUNT": "1"}).restart_count == 1


def test_world_size_one_needs_no_master():
    env = parse_env({"WORLD_SIZE": "1", "RANK": "0"})
    assert not env.distributed


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({"RANK": "1"}, ["RANK", "WORLD_SIZE"]),
        ({"WORLD_SIZE": "2"}, ["RANK"]),
        ({**DIST, "RANK": "4"}, ["RANK", "[0, 3]"]),
        ({**DIST, "RANK": "-1"}, ["RANK"]),
        ({**DIST, "WORLD_SIZE": "0", "RANK": "0"}, ["WORLD_SIZE", ">= 1"]),
        ({**DIST, "WORLD_SIZE": "two"}, ["WORLD_SIZE", "integer", "'two'"]),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29500"}, ["MASTER_ADDR"]),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h"}, ["MASTER_PORT"]),
        ({**DIST, "MASTER_PORT": "70000"}, ["MASTER_PORT", "65535"]),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "1"}, ["WORLD_SIZE", "RANK"]),
        ({**DIST, "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, ["LOCAL_RANK"]),
        ({**DIST, "LOCAL_WORLD_SIZE": "8"}, ["LOCAL_WORLD_SIZE", "WORLD_SIZE"]),
        ({**DIST, "DPJOB_BACKEND": "mpi"}, ["DPJOB_BACKEND", "mpi"]),
        ({**DIST, "DPJOB_RESTART_COUNT": "-1"}, ["DPJOB_RESTART_COUNT"]),
    ],
)
def test_invalid_environment_names_the_variable_to_fix(environ, names):
    with pytest.raises(EnvError) as err:
        parse_env(environ)
    message = str(err.value)
    assert "\n" not in message
    for name in names:
        assert name in message


@pytest.mark.parametrize(
    ("requested", "cuda", "npu", "expected"),
    [
        (None, True, True, "nccl"),
        (None, False, True, "hccl"),
        (None, False, False, "gloo"),
        ("gloo", True, False, "gloo"),
        ("nccl", True, False, "nccl"),
        ("hccl", False, True, "hccl"),
    ],
)
def test_backend_selection(requested, cuda, npu, expected):
    assert select_backend(requested, cuda_available=cuda, npu_available=npu) == expected


@pytest.mark.parametrize("requested", ["nccl", "hccl"])
def test_requesting_missing_hardware_is_an_error_not_a_silent_cpu_run(requested):
    with pytest.raises(EnvError, match=f"DPJOB_BACKEND={requested}"):
        select_backend(requested, cuda_available=False, npu_available=False)


def test_device_follows_local_rank():
    assert device_for("gloo", 3, device_count=0) == "cpu"
    assert device_for("nccl", 3, device_count=8) == "cuda:3"
    assert device_for("hccl", 1, device_count=8) == "npu:1"
    with pytest.raises(EnvError, match="LOCAL_RANK=2 but only 2 cuda"):
        device_for("nccl", 2, device_count=2)


# procsPerReplica processes per pod, each with LOCAL_RANK 0..N-1, on pods that see `visible` GPUs.
@pytest.mark.parametrize(("procs", "visible"), [(1, 1), (2, 2), (4, 4), (2, 8), (8, 8)])
def test_each_process_of_a_pod_trains_on_its_own_gpu_and_binds_nccl_to_it(procs, visible):
    devices, bound = [], []
    for pod in range(2):
        for local in range(procs):
            env = parse_env({"WORLD_SIZE": str(2 * procs), "RANK": str(pod * procs + local), "MASTER_ADDR": "r0",
                             "MASTER_PORT": "29500", "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(procs)})
            device = device_for("nccl", env.local_rank, device_count=visible)
            devices.append((pod, device))
            bound.append(bound_device("nccl", device))
    assert len(set(devices)) == 2 * procs  # no two processes of a pod share a GPU
    assert [d for _, d in devices[:procs]] == [f"cuda:{i}" for i in range(procs)]  # LOCAL_RANK, not RANK
    assert bound == [d for _, d in devices]  # NCCL bound to that GPU, never rank % visible GPUs


@pytest.mark.parametrize(("backend", "device", "bound"), [
    ("nccl", "cuda:3", "cuda:3"), ("gloo", "cpu", None), ("hccl", "npu:1", None),
])
def test_only_nccl_binds_its_process_group_to_a_device(backend, device, bound):
    assert bound_device(backend, device) == bound


@pytest.mark.parametrize(("env", "joins"), [
    ({}, False),                                                                    # plain single process
    ({"WORLD_SIZE": "1", "RANK": "0"}, False),
    ({"WORLD_SIZE": "1", "RANK": "0", "TORCHELASTIC_RUN_ID": "x"}, True),          # torchrun --nproc-per-node 1
    (DIST, True),
])
def test_torchrun_always_forms_a_process_group_a_bare_world_of_one_does_not(env, joins):
    assert parse_env(env).joins_process_group is joins
