"""MindSpore data parallel on this machine: real msrun, two CPU workers, MindSpore's own collectives.

The seed's promise, checked on parameters rather than on loss curves, at steps 1-3 (before
convergence, where a wrong gradient still shows):

(a) 2 ranks with batch b end with the parameters of 1 process with batch 2b (float tolerance:
    the all-reduce sums in another order), and of *not* 1 process with batch b, which is what a
    rank whose gradients were never reduced would compute;
(b) ``--grad-reduction sum`` (gradients_mean=False) at lr x equals 1 process at lr 2x;
(c) both ranks' parameter hashes are identical after every step although their shards differ
    (disjoint rows, together the single process's batch);
(d) a run checkpointed at step 3 and resumed to step 6 ends bit-identical to an uninterrupted one.

Each msrun pays the mindspore import in three processes (two workers and the scheduler), so the
runs are made once per module, the independent ones side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.mindspore]

ROOT = Path(__file__).resolve().parents[2]
STRIP = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK_TABLE_FILE",
         "MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID", "RANK_ID", "RANK_SIZE",
         "DEVICE_ID", "DPJOB_FRAMEWORK")
COMMON = ["--framework", "mindspore", "--task", "mlp", "--dataset-size", "64", "--seed", "3",
          "--metrics-port", "0", "--log-every", "0"]
TOL = 1e-5
TIMEOUT = 300


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STRIP}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "trainer-image"), env.get("PYTHONPATH", "")])
    # msrun starts its workers as `python ...`: the venv running these tests must come first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@dataclass
class Run:
    """One launch (msrun or a single process) writing reports into ``out``."""

    out: Path
    proc: subprocess.Popen[bytes]
    ranks: int

    def reports(self) -> list[dict[str, Any]]:
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        logs = "".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.out.glob("**/*.log")))
        assert self.proc.returncode == 0, f"exit {self.proc.returncode} in {self.out}:\n{logs}"
        return [json.loads((self.out / f"report-rank{r}.json").read_text()) for r in range(self.ranks)]


def _msrun(out: Path, *args: str) -> Run:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(Path(sys.executable).parent / "msrun"), "--worker_num=2", "--local_worker_num=2",
           f"--master_port={free_port()}", "--join=True", f"--log_dir={out / 'logs'}", "--cluster_time_out=120",
           "python", "-m", "dpjob_trainer", *COMMON, "--report", str(out), *args]
    log = open(out / "msrun.log", "wb")  # noqa: SIM115 (closed with the process)
    return Run(out, subprocess.Popen(cmd, cwd=out, env=_env(), stdout=log, stderr=subprocess.STDOUT), 2)


def _single(out: Path, *args: str) -> Run:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "dpjob_trainer", *COMMON, "--report", str(out), *args]
    log = open(out / "single.log", "wb")  # noqa: SIM115
    return Run(out, subprocess.Popen(cmd, cwd=out, env=_env(), stdout=log, stderr=subprocess.STDOUT), 1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every launch the tests compare, started side by side where independent."""
    tmp = tmp_path_factory.mktemp("ms")
    ckpt = tmp / "ckpt"
    started = {
        "mean": _msrun(tmp / "mean", "--steps", "3", "--batch-size", "4", "--lr", "0.1"),
        "sum": _msrun(tmp / "sum", "--steps", "3", "--batch-size", "4", "--lr", "0.05", "--grad-reduction", "sum"),
        "first_half": _msrun(tmp / "first_half", "--steps", "3", "--batch-size", "4", "--checkpoint-dir", str(ckpt)),
        "whole": _msrun(tmp / "whole", "--steps", "6", "--batch-size", "4"),
        "single_2b": _single(tmp / "single_2b", "--steps", "3", "--batch-size", "8", "--lr", "0.1"),
        "single_b": _single(tmp / "single_b", "--steps", "3", "--batch-size", "4", "--lr", "0.1"),
        "single_2b_lr_x": _single(tmp / "single_2b_lr_x", "--steps", "3", "--batch-size", "8", "--lr", "0.05"),
    }
    done = {name: run.reports() for name, run in started.items()}
    assert (ckpt / "ms-checkpoint.ckpt").exists(), "the first half wrote no checkpoint"
    resumed = _msrun(tmp / "resumed", "--steps", "6", "--batch-size", "4", "--checkpoint-dir", str(ckpt))
    done["resumed"] = resumed.reports()
    return done


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a["params"].keys() == b["params"].keys()
    return max(abs(x - y) for name in a["params"] for x, y in zip(a["params"][name], b["params"][name], strict=True))


def test_two_ranks_equal_one_process_with_twice_the_batch(runs: dict[str, list[dict[str, Any]]]) -> None:
    rank0, rank1 = runs["mean"]
    single = runs["single_2b"][0]
    assert rank0["world_size"] == 2 and rank0["grad_reduction"] == "mean" and rank0["steps"] == 3
    assert rank0["initial_param_sha256"] == single["initial_param_sha256"]  # same start, from the seed
    assert rank0["param_sha256"] != rank0["initial_param_sha256"]  # it trained
    assert _max_diff(rank0, single) < TOL and _max_diff(rank1, single) < TOL
    assert rank0["final_loss"] == pytest.approx(single["final_loss"], rel=1e-5)
    # The tolerance discriminates: unreduced gradients (each rank on its own batch b) land far away.
    assert _max_diff(runs["single_b"][0], single) > 100 * TOL


def test_sum_reduction_at_lr_equals_one_process_at_twice_the_lr(runs: dict[str, list[dict[str, Any]]]) -> None:
    rank0, rank1 = runs["sum"]
    assert rank0["grad_reduction"] == "sum" and rank0["lr"] == 0.05
    single = runs["single_2b"][0]  # lr 0.1 = 2 x 0.05
    assert _max_diff(rank0, single) < TOL and rank0["param_sha256"] == rank1["param_sha256"]
    # A sum that were a mean would equal one process at lr x instead: it does not.
    assert _max_diff(rank0, runs["single_2b_lr_x"][0]) > 100 * TOL


def test_ranks_agree_every_step_on_different_shards(runs: dict[str, list[dict[str, Any]]]) -> None:
    rank0, rank1 = runs["mean"]
    assert len(rank0["param_sha256_steps"]) == 3
    assert rank0["param_sha256_steps"] == rank1["param_sha256_steps"]
    assert len(set(rank0["param_sha256_steps"])) == 3  # a new hash every step: the update is applied
    single_rows = runs["single_2b"][0]["step_rows"]
    for step, (rows0, rows1) in enumerate(zip(rank0["step_rows"], rank1["step_rows"], strict=True)):
        assert len(rows0) == len(rows1) == 4 and not set(rows0) & set(rows1), f"step {step + 1}: shards overlap"
        assert sorted(rows0 + rows1) == sorted(single_rows[step]), f"step {step + 1}: not the 2b batch"


def test_resume_from_checkpoint_equals_uninterrupted_run(runs: dict[str, list[dict[str, Any]]]) -> None:
    whole, resumed, first = runs["whole"][0], runs["resumed"][0], runs["first_half"][0]
    assert first["steps"] == 3
    assert (resumed["resumed_from_step"], resumed["steps"], resumed["steps_this_run"]) == (3, 6, 3)
    assert resumed["initial_param_sha256"] == whole["param_sha256_steps"][2]  # loaded step 3's parameters
    assert resumed["param_sha256_steps"] == whole["param_sha256_steps"][3:]
    assert resumed["param_sha256"] == whole["param_sha256"] == runs["resumed"][1]["param_sha256"]
    assert resumed["step_rows"] == whole["step_rows"][3:6]  # the data continues where it stopped
