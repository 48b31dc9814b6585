"""The MindSpore backend's pure parts: --framework dispatch, its flags, its launch environment
and the sharding arithmetic that makes N ranks equal one process.

None of this imports mindspore (a test below proves it), but the module is marked ``mindspore``
as the whole backend is: a developer without the MindSpore venv skips it, CI without it fails
with one line naming ``make venv-mindspore`` (tests/support/mindspore.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpjob_trainer.__main__ import build_parser, main
from dpjob_trainer.env import EnvError
from dpjob_trainer.frameworks import FrameworkError, resolve_framework
from dpjob_trainer.ms.config import ConfigError, MsConfig
from dpjob_trainer.ms.env import parse_ms_env
from dpjob_trainer.ms.sharding import (
    ShardError,
    check_shardable,
    global_step_rows,
    shard_rows,
    step_rows,
    steps_per_epoch,
)

pytestmark = [pytest.mark.unit, pytest.mark.mindspore]

TRAINER = Path(__file__).resolve().parents[2] / "trainer-image"
# What msrun 2.10 exported to worker 1 of `msrun --worker_num=2 --local_worker_num=2` (observed).
MSRUN_WORKER = {"RANK_SIZE": "2", "RANK_ID": "1", "MS_WORKER_NUM": "2", "MS_SCHED_HOST": "127.0.0.1",
                "MS_SCHED_PORT": "18123", "MS_TOPO_TIMEOUT": "600", "MS_ROLE": "MS_WORKER", "DEVICE_ID": "1",
                "MS_NODE_ID": "1"}
MS_KEYS = ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID", "RANK_ID", "RANK_SIZE",
           "DEVICE_ID", "RANK_TABLE_FILE", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "DPJOB_FRAMEWORK")


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in MS_KEYS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


# ---- --framework -------------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "env", "expected"), [
    (None, {}, "torch"),
    ("mindspore", {}, "mindspore"),
    ("torch", {"DPJOB_FRAMEWORK": "mindspore"}, "torch"),  # the flag wins
    (None, {"DPJOB_FRAMEWORK": "mindspore"}, "mindspore"),
    (None, {"DPJOB_FRAMEWORK": "pytorch"}, "torch"),  # the operator's spec.framework values
    (None, {"DPJOB_FRAMEWORK": "oneflow"}, "torch"),  # OneFlow's env is torch's; no OneFlow runtime here
    (None, {"DPJOB_FRAMEWORK": " MindSpore "}, "mindspore"),
])
def test_resolve_framework(flag: str | None, env: dict[str, str], expected: str) -> None:
    assert resolve_framework(flag, env) == expected


@pytest.mark.parametrize(("flag", "env", "words"), [
    ("caffe", {}, "--framework must be one of torch, mindspore, got 'caffe'"),
    ("oneflow", {}, "--framework must be one of"),
    (None, {"DPJOB_FRAMEWORK": "jax"}, "DPJOB_FRAMEWORK must be one of"),
])
def test_resolve_framework_refuses_unknown(flag: str | None, env: dict[str, str], words: str) -> None:
    with pytest.raises(FrameworkError, match=words):
        resolve_framework(flag, env)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dpjob-trainer: error: "), err
    return err


def test_unknown_framework_exits_2_with_one_line(clean_env: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--framework", "caffe", "--metrics-port", "0"]) == 2
    assert "caffe" in _one_line(capsys)


def test_dpjob_framework_env_dispatches_to_mindspore(clean_env: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The env default reaches the MindSpore checks (a bogus MS_ROLE), not torch's parse_env."""
    clean_env.setenv("DPJOB_FRAMEWORK", "mindspore")
    clean_env.setenv("MS_ROLE", "MS_BOSS")
    assert main(["--metrics-port", "0"]) == 2
    assert "MS_ROLE must be one of MS_WORKER, MS_SCHED" in _one_line(capsys)


def test_mindspore_refuses_torch_only_flags(clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--framework", "mindspore", "--grad-accum", "2", "--amp", "--metrics-port", "0"]) == 2
    assert "does not support --grad-accum, --amp" in _one_line(capsys)


def test_mindspore_with_only_torch_env_says_how_to_launch(clean_env: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "0")
    assert main(["--framework", "mindspore", "--metrics-port", "0"]) == 2
    assert "launch it with msrun" in _one_line(capsys)


def test_shared_modules_import_neither_framework() -> None:
    """The flag, env and sharding checks run before any framework import: fast exit 2 in a pod."""
    code = ("import sys; import dpjob_trainer.__main__, dpjob_trainer.events, dpjob_trainer.metrics, "
            "dpjob_trainer.frameworks, dpjob_trainer.ms.cli, dpjob_trainer.ms.sharding; "
            "bad = {'torch', 'mindspore'} & set(sys.modules); assert not bad, bad")
    env = {**os.environ, "PYTHONPATH": str(TRAINER)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_only_the_ms_package_imports_mindspore() -> None:
    outside = [p for p in (TRAINER / "dpjob_trainer").rglob("*.py")
               if "ms" not in p.relative_to(TRAINER / "dpjob_trainer").parts[:1]]
    assert outside, "no modules found"
    for path in outside:
        for line in path.read_text().splitlines():
            assert not line.strip().startswith(("import mindspore", "from mindspore")), f"{path}: {line}"


# ---- the launch environment --------------------------------------------------------------------
def test_msrun_worker_env() -> None:
    env = parse_ms_env({**MSRUN_WORKER, "WORLD_SIZE": "16", "MASTER_ADDR": ""})  # torch's contract is ignored
    assert (env.mode, env.role, env.expected_world, env.rank_hint, env.local_rank) == ("msrun", "MS_WORKER", 2, 1, 1)
    assert env.distributed and not env.scheduler


def test_msrun_scheduler_env() -> None:
    sched = {k: v for k, v in MSRUN_WORKER.items() if k not in ("DEVICE_ID", "MS_NODE_ID")}
    env = parse_ms_env({**sched, "MS_ROLE": "MS_SCHED", "RANK_ID": "0"})
    assert env.scheduler and env.local_rank == 0


@pytest.mark.parametrize(("change", "words"), [
    ({"MS_SCHED_HOST": ""}, "MS_SCHED_HOST"),
    ({"MS_SCHED_PORT": "70000"}, "MS_SCHED_PORT must be a port"),
    ({"MS_WORKER_NUM": "0"}, "MS_WORKER_NUM must be >= 1"),
    ({"MS_NODE_ID": "2"}, r"MS_NODE_ID/RANK_ID must be in \[0, MS_WORKER_NUM-1\] = \[0, 1\], got 2"),
    ({"MS_WORKER_NUM": "two"}, "MS_WORKER_NUM must be an integer"),
])
def test_msrun_env_errors_name_the_variable(change: dict[str, str], words: str) -> None:
    with pytest.raises(EnvError, match=words):
        parse_ms_env({**MSRUN_WORKER, **change})


def test_rank_table_startup() -> None:
    env = parse_ms_env({"RANK_TABLE_FILE": "/etc/hccl.json", "RANK_ID": "3", "RANK_SIZE": "8", "DEVICE_ID": "3"})
    assert (env.mode, env.expected_world, env.rank_hint, env.local_rank) == ("ranktable", 8, 3, 3)
    with pytest.raises(EnvError, match="DEVICE_ID"):
        parse_ms_env({"RANK_TABLE_FILE": "/etc/hccl.json", "RANK_ID": "3", "RANK_SIZE": "8"})
    with pytest.raises(EnvError, match="RANK_ID must be in"):
        parse_ms_env({"RANK_TABLE_FILE": "/etc/hccl.json", "RANK_ID": "8", "RANK_SIZE": "8", "DEVICE_ID": "0"})


def test_no_environment_is_one_process() -> None:
    env = parse_ms_env({"WORLD_SIZE": "1", "RANK": "0"})
    assert (env.mode, env.expected_world, env.distributed) == ("single", 1, False)


# ---- flags -------------------------------------------------------------------------------------
def _cfg(*argv: str) -> MsConfig:
    return MsConfig.from_args(build_parser().parse_args(["--framework", "mindspore", *argv]))


def test_config_defaults_are_the_torch_tasks() -> None:
    mlp = _cfg().resolve(world_size=2)
    assert (mlp.batch_size, mlp.lr, mlp.steps, mlp.dataset_size) == (32, 0.1, 200, 2048)
    # linear: OneFlow's 4 samples split over the ranks, as tasks.py does
    assert [_cfg("--task", "linear").resolve(w).batch_size for w in (1, 2, 3, 4)] == [4, 2, 1, 1]
    c = _cfg("--steps", "7", "--batch-size", "5", "--lr", "0.5", "--grad-reduction", "sum", "--checkpoint-dir", "/x")
    assert (c.steps, c.batch_size, c.lr, c.grad_reduction, c.checkpoint_dir) == (7, 5, 0.5, "sum", "/x")


@pytest.mark.parametrize(("argv", "words"), [
    (["--task", "cnn"], "--task must be one of linear, mlp"),
    (["--optimizer", "adamw"], "does not support --optimizer"),
    (["--entrypoint", "a:b"], "does not support --entrypoint"),
    (["--shuffle"], "does not support --shuffle"),
])
def test_config_refuses(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        _cfg(*argv)


def test_config_refuses_dataset_size_for_linear() -> None:
    with pytest.raises(ConfigError, match="--dataset-size does not apply"):
        _cfg("--task", "linear", "--dataset-size", "8").resolve(1)


# ---- sharding arithmetic -----------------------------------------------------------------------
def test_shards_are_strided_and_disjoint() -> None:
    assert shard_rows(10, 2, 0) == [0, 2, 4, 6, 8] and shard_rows(10, 2, 1) == [1, 3, 5, 7, 9]
    rows = [set(shard_rows(12, 3, r)) for r in range(3)]
    assert set.union(*rows) == set(range(12)) and sum(map(len, rows)) == 12


@pytest.mark.parametrize(("size", "shards", "batch"), [(64, 2, 4), (2048, 2, 32), (60, 3, 4), (4, 2, 2), (48, 4, 5)])
def test_n_ranks_see_what_one_process_with_n_times_the_batch_sees(size: int, shards: int, batch: int) -> None:
    """The data half of the promise: every step, the union of the shards' rows is the single
    process's batch of shards*batch rows, and the shards' rows differ."""
    assert steps_per_epoch(size, shards, batch) == steps_per_epoch(size, 1, shards * batch)
    for step in range(3 * steps_per_epoch(size, shards, batch)):  # across epochs too
        single = step_rows(step, size, 1, 0, shards * batch)
        assert global_step_rows(step, size, shards, batch) == sorted(single)
        per_shard = [set(step_rows(step, size, shards, r, batch)) for r in range(shards)]
        assert all(len(s) == batch for s in per_shard)
        assert len(set.union(*per_shard)) == shards * batch  # disjoint


@pytest.mark.parametrize(("size", "shards", "batch", "words"), [
    (65, 2, 4, "not a multiple of the world size 2"),
    (8, 4, 3, "fewer than --batch-size 3"),
    (8, 0, 1, "must be >= 1"),
])
def test_check_shardable(size: int, shards: int, batch: int, words: str) -> None:
    with pytest.raises(ShardError, match=words):
        check_shardable(size, shards, batch)
