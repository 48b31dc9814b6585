"""A NaN/Inf loss or gradient never reaches the weights or the checkpoint, and every rank agrees.

What a user would notice: with ``--nonfinite stop`` (default) the run exits 3 at the bad step on
every rank and the last good checkpoint is byte-for-byte what it was; with ``--nonfinite skip``
the bad update is not applied (the parameters equal those of a run that stopped just before it),
training goes on, all ranks end identical, and too many bad steps in a row still stop the run;
a checkpoint is never written from NaN/Inf weights.

The runs are the real trainer: the CLI entry point in processes forked from a forkserver that
imported torch once (as tests/e2e/test_trainer_ddp.py does), one process for world size 1 and a
two-rank gloo group on 127.0.0.1 for world size 2. The hidden ``--inject-nan-at-step K`` hook makes
the loss NaN on rank 1 only while every gradient stays finite: a rank that decided from its own
values alone would then disagree with rank 0, and the parameter hashes would differ. The whole
module takes a few seconds (tiny linear task), hence the unit marker.
"""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing as mp
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.trainer import run_trainer_in_process

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")

from dpjob_trainer import train as train_mod  # noqa: E402 - needs torch, skipped above without it
from dpjob_trainer.checkpoint import nonfinite_entries  # noqa: E402
from dpjob_trainer.events import emit  # noqa: E402
from dpjob_trainer.nonfinite import EXIT_NONFINITE, NonfinitePolicy  # noqa: E402

CTX = mp.get_context("forkserver")
# The same preload list as tests/e2e/test_trainer_ddp.py: the list is per process (the last module
# collected sets it for every forkserver user), so both modules name the same one. In a git
# worktree the preloaded trainer can come from another checkout (the editable install's):
# _rank_main refuses to run another checkout's code rather than test it by mistake.
CTX.set_forkserver_preload(["torch", "torch._dynamo", "torch.distributed", "prometheus_client", "dpjob_trainer.train"])
TRAINER_DIR = str(Path(train_mod.__file__).resolve().parent)
ENV_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "RANK_TABLE_FILE", "DPJOB_BACKEND", "TORCHELASTIC_RUN_ID", "DPJOB_METRICS_PORT")
K = 4  # the step that goes bad in the scenarios below (1-based, as in the logs)


# ---- the pure rule ---------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "limit", "nonfinite", "verdicts"), [
    ("stop", 3, [False, True], ["apply", "stop"]),
    ("skip", 3, [True, True, True, True], ["skip", "skip", "skip", "stop"]),
    ("skip", 2, [True, False, True, True, True], ["skip", "apply", "skip", "skip", "stop"]),  # in a row only
    ("skip", 1, [True, False, True, True], ["skip", "apply", "skip", "stop"]),
])  # fmt: skip
def test_policy_skips_up_to_the_limit_of_consecutive_non_finite_steps(mode, limit, nonfinite, verdicts):
    policy = NonfinitePolicy(mode, limit)
    assert [policy.decide(bad) for bad in nonfinite] == verdicts
    assert policy.skipped == verdicts.count("skip")


@pytest.mark.parametrize(("mode", "limit", "needle"), [
    ("ignore", 3, "--nonfinite must be stop or skip"),
    ("skip", 0, "--max-nonfinite-steps must be >= 1"),
])  # fmt: skip
def test_policy_rejects_flags_that_cannot_work(mode, limit, needle):
    with pytest.raises(ValueError, match=needle):
        NonfinitePolicy(mode, limit).validate()


@pytest.mark.parametrize(("state", "bad"), [
    ({"model": {"w": torch.ones(3), "b": torch.zeros(1)}}, []),
    ({"model": {"w": torch.tensor([1.0, float("nan")])}}, ["model.w"]),
    ({"model": {"w": torch.tensor([float("-inf")]), "b": torch.tensor([float("inf")])}}, ["model.w", "model.b"]),
    ({"model": {"w": torch.ones(2)}, "optimizer": {"state": {0: {"momentum_buffer": torch.tensor([float("nan")])}}}},
     ["optimizer.state.0.momentum_buffer"]),
    ({"model": {"steps": torch.tensor([2**31 - 1], dtype=torch.int32)}, "lr": float("nan")}, []),  # tensors only
    ({"model": {"w": torch.tensor([1.0, float("nan")], dtype=torch.bfloat16)}}, ["model.w"]),
])  # fmt: skip
def test_nonfinite_entries_names_every_nan_or_inf_tensor(state, bad):
    assert nonfinite_entries(state) == bad


def test_log_lines_stay_strict_json_when_a_number_is_nan():
    out = io.StringIO()
    emit("step", out, loss=float("nan"), grad_norm=float("inf"), step=3)

    def refuse(name: str) -> None:
        raise AssertionError(f"not JSON: {name}")

    line = json.loads(out.getvalue(), parse_constant=refuse)
    assert (line["loss"], line["grad_norm"], line["step"]) == ("nan", "inf", 3)


# ---- real runs: world size 1 and a two-rank gloo group -----------------------------------------

def _rank_main(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """Runs in the child: this rank's environment and log file, then the real CLI."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for key in ENV_KEYS:
        os.environ.pop(key, None)
    os.environ.update(env)
    from dpjob_trainer import __main__ as cli
    from dpjob_trainer.__main__ import main

    here = str(Path(cli.__file__).resolve().parent)
    if here != TRAINER_DIR:  # another module set a forkserver preload that imported another checkout
        sys.stderr.write(f"the child runs the trainer in {here}, the test {TRAINER_DIR}\n")
        os._exit(99)

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass
class Run:
    """One finished job: exit codes, per-rank logs and reports."""

    workdir: Path
    world: int
    codes: list[int]

    def log(self, rank: int) -> str:
        return (self.workdir / f"rank{rank}.log").read_text()

    def events(self, rank: int, kind: str) -> list[dict]:
        lines = [json.loads(line) for line in self.log(rank).splitlines() if line.startswith("{")]
        return [e for e in lines if e["event"] == kind]

    def reports(self) -> list[dict]:
        return [json.loads((self.workdir / "report" / f"report-rank{r}.json").read_text()) for r in range(self.world)]

    def all_ranks(self, kind: str) -> list[list[int]]:
        """The steps of ``kind`` events, per rank."""
        return [[e["step"] for e in self.events(r, kind)] for r in range(self.world)]


def train(tmp_path: Path, name: str, world: int, args: list[str], ckpt: Path, timeout: float = 120) -> Run:
    """Run the linear task on ``world`` ranks to completion; ``args`` come last and win."""
    workdir = tmp_path / name
    (workdir / "report").mkdir(parents=True)
    argv = ["--task", "linear", "--num-threads", "1", "--metrics-port", "0", "--log-every", "1",
            "--rendezvous-timeout", "60", "--report", str(workdir / "report"), "--checkpoint-dir", str(ckpt), *args]
    port = free_port()
    procs = []
    for rank in range(world):
        env = {"DPJOB_BACKEND": "gloo"}  # world 1: no contract at all, the single-device baseline
        if world > 1:
            env.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DPJOB_NAME=name)
        proc = CTX.Process(target=_rank_main, args=(argv, env, str(workdir / f"rank{rank}.log")), daemon=True)
        proc.start()
        procs.append(proc)
    for proc in procs:
        proc.join(timeout)
    if any(p.exitcode is None for p in procs):
        for p in procs:
            p.kill()
        raise AssertionError(f"{name} did not finish in {timeout}s: " +
                             "\n".join((workdir / f"rank{r}.log").read_text()[-2000:] for r in range(world)))
    return Run(workdir, world, [p.exitcode for p in procs])


def assert_codes(run: Run, code: int) -> None:
    assert run.codes == [code] * run.world, (run.codes, [run.log(r)[-2000:] for r in range(run.world)])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """param_sha256 after K-1 clean steps, per world size: where a run that never applied step K must be."""
    cache: dict[int, str] = {}

    def get(world: int) -> str:
        if world not in cache:
            tmp = tmp_path_factory.mktemp(f"reference-{world}")
            run = train(tmp, "ref", world, ["--steps", str(K - 1)], tmp / "ckpt")
            assert_codes(run, 0)
            (cache[world],) = {r["param_sha256"] for r in run.reports()}
        return cache[world]

    return get


@pytest.mark.parametrize("world", [1, 2])
def test_stop_mode_exits_3_at_the_bad_step_on_every_rank_and_keeps_the_checkpoint(tmp_path, world, reference):
    ckpt = tmp_path / "ckpt"
    assert_codes(train(tmp_path, "good", world, ["--steps", "2"], ckpt), 0)
    good = (ckpt / "checkpoint.pt").read_bytes()

    # Resumes at 2, trains step 3, then step K=4 has a NaN loss on one rank.
    run = train(tmp_path, "bad", world, ["--steps", "8", "--inject-nan-at-step", str(K)], ckpt)
    assert_codes(run, EXIT_NONFINITE)
    assert (ckpt / "checkpoint.pt").read_bytes() == good
    assert sorted(os.listdir(ckpt)) == ["checkpoint.pt"]
    assert run.all_ranks("nonfinite_stop") == [[K]] * world
    assert run.all_ranks("checkpoint") == [[]] * world
    reports = run.reports()
    assert [r["steps"] for r in reports] == [K - 1] * world
    assert {r["param_sha256"] for r in reports} == {reference(world)}  # step K was not applied
    stop = run.events(0, "nonfinite_stop")[0]
    assert stop["loss"] == "nan" and stop["nonfinite_ranks"] == 1 and stop["exit_code"] == EXIT_NONFINITE
    for rank in range(world):
        error = run.log(rank).strip().splitlines()[-1]
        assert error.startswith(f"dpjob-trainer: error: non-finite loss or gradient at step {K} (loss nan")
        assert "the checkpoint of step 2" in error and "is kept" in error


@pytest.mark.parametrize("world", [1, 2])
def test_skip_mode_leaves_the_parameters_of_a_bad_step_unchanged_on_every_rank(tmp_path, world, reference):
    run = train(tmp_path, "skip", world, ["--steps", str(K), "--nonfinite", "skip", "--inject-nan-at-step", str(K)],
                tmp_path / "ckpt")
    assert_codes(run, 0)
    reports = run.reports()
    assert {r["param_sha256"] for r in reports} == {reference(world)}
    assert [r["skipped_steps"] for r in reports] == [1] * world
    assert [r["steps"] for r in reports] == [K] * world  # the skipped step consumed its batch and counts
    assert run.all_ranks("nonfinite_step") == [[K]] * world
    assert run.events(0, "nonfinite_step")[0]["loss"] == "nan"
    saved = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=True)
    assert saved["step"] == K and not nonfinite_entries(saved)


@pytest.mark.parametrize("world", [1, 2])
def test_skip_mode_trains_on_after_a_bad_step_and_ranks_end_identical(tmp_path, world):
    steps = K + 3
    run = train(tmp_path, "skip", world, ["--steps", str(steps), "--nonfinite", "skip",
                                          "--inject-nan-at-step", str(K)], tmp_path / "ckpt")
    assert_codes(run, 0)
    reports = run.reports()
    assert len({r["param_sha256"] for r in reports}) == 1
    assert [(r["steps"], r["skipped_steps"]) for r in reports] == [(steps, 1)] * world
    assert reports[0]["final_loss"] < reports[0]["initial_loss"]
    assert run.all_ranks("nonfinite_step") == [[K]] * world
    assert run.all_ranks("step") == [list(range(1, steps + 1))] * world


@pytest.mark.parametrize(("world", "limit"), [(1, 3), (2, 2), (2, 1)])
def test_skip_mode_stops_after_max_consecutive_non_finite_steps(tmp_path, world, limit):
    first = 3
    run = train(tmp_path, "diverged", world, [
        "--steps", "20", "--nonfinite", "skip", "--max-nonfinite-steps", str(limit),
        "--inject-nan-at-step", str(first), "--inject-nan-steps", "100",
    ], tmp_path / "ckpt")  # fmt: skip
    assert_codes(run, EXIT_NONFINITE)
    assert run.all_ranks("nonfinite_step") == [list(range(first, first + limit))] * world
    assert run.all_ranks("nonfinite_stop") == [[first + limit]] * world
    reports = run.reports()
    assert [(r["steps"], r["skipped_steps"]) for r in reports] == [(first + limit - 1, limit)] * world
    assert len({r["param_sha256"] for r in reports}) == 1
    assert not (tmp_path / "ckpt" / "checkpoint.pt").exists()  # no final checkpoint of a diverged run
    assert f"more than --max-nonfinite-steps {limit}" in run.log(0).strip().splitlines()[-1]


@pytest.mark.parametrize(("world", "args", "reason"), [
    (1, ["--steps", "1"], "final"),
    (2, ["--steps", "1"], "final"),
    (2, ["--steps", "3", "--checkpoint-every", "1"], "periodic"),
])  # fmt: skip
def test_a_checkpoint_is_never_written_from_non_finite_weights(tmp_path, world, args, reason):
    """lr 1e38 turns finite gradients into infinite weights: the step guard cannot see it, the save must."""
    ckpt = tmp_path / "ckpt"
    assert_codes(train(tmp_path, "good", world, ["--steps", "1"], ckpt), 0)
    good = (ckpt / "checkpoint.pt").read_bytes()

    run = train(tmp_path, "overflow", world, ["--no-resume", "--lr", "1e38", *args], ckpt)
    assert_codes(run, EXIT_NONFINITE)
    assert (ckpt / "checkpoint.pt").read_bytes() == good
    assert sorted(os.listdir(ckpt)) == ["checkpoint.pt"]
    refused = [run.events(r, "checkpoint_refused") for r in range(world)]
    assert [[(e["step"], e["reason"]) for e in events] for events in refused] == [[(1, reason)]] * world
    assert refused[0][0]["tensors"] == ["model.w"]
    assert run.all_ranks("checkpoint") == [[]] * world
    assert "refused to write the" in run.log(0).strip().splitlines()[-1]


def test_bad_nonfinite_flags_exit_2(tmp_path):
    run = train(tmp_path, "flags", 1, ["--steps", "1", "--nonfinite", "skip", "--max-nonfinite-steps", "0"],
                tmp_path / "ckpt")
    assert_codes(run, 2)
    assert "--max-nonfinite-steps must be >= 1" in run.log(0)


# ---- in-process: the metric, and a NaN gradient behind a finite loss ----------------------------

def run_in_process(tmp_path: Path, args: list[str], metrics=None) -> tuple[int, list[dict], dict]:
    return run_trainer_in_process(tmp_path, ["--task", "linear", *args], metrics)


def test_skipped_steps_are_counted_in_the_metric(tmp_path):
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from dpjob_trainer.metrics import TrainerMetrics

    metrics = TrainerMetrics()
    code, _, _ = run_in_process(tmp_path, ["--steps", "6", "--nonfinite", "skip", "--inject-nan-at-step", "2",
                                           "--inject-nan-steps", "2"], metrics)
    assert code == 0
    samples = {s.name: s.value for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
               for s in f.samples}
    assert samples["dpjob_trainer_nonfinite_steps_total"] == 2
    assert samples["dpjob_trainer_steps_total"] == 6


@pytest.mark.parametrize(("mode", "code"), [("skip", 0), ("stop", EXIT_NONFINITE)])
def test_a_nan_gradient_behind_a_finite_loss_is_caught_too(tmp_path, monkeypatch, mode, code):
    """The other half of the check: the loss is fine, the gradient of step K is NaN."""
    backward = itertools.count(1)
    real_build_task = train_mod.build_task

    def build_task(*args, **kwargs):
        task = real_build_task(*args, **kwargs)
        task.model.get_parameter("w").register_hook(lambda g: g * float("nan") if next(backward) == K else g)
        return task

    (tmp_path / "ref").mkdir()
    assert run_in_process(tmp_path / "ref", ["--steps", str(K - 1)])[0] == 0
    before = json.loads((tmp_path / "ref" / "report-rank0.json").read_text())["weights"]

    monkeypatch.setattr(train_mod, "build_task", build_task)
    got, events, report = run_in_process(tmp_path, ["--steps", str(K), "--nonfinite", mode])
    assert got == code
    flagged = [e for e in events if e["event"] in ("nonfinite_step", "nonfinite_stop")]
    assert [(e["step"], e["grad_norm"]) for e in flagged] == [(K, "nan")]
    assert isinstance(flagged[0]["loss"], float)
    assert report["weights"] == before
