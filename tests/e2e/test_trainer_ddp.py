"""Real trainer processes forming a gloo DDP group on 127.0.0.1.

What a user would notice: every rank ends with the same parameters; N ranks with batch b equal
one process with batch N*b (the data-parallel promise); sum reduction is N times the gradient;
OneFlow's regression converges to w = [2, 3]; a SIGTERM-ed and resumed job ends exactly where an
uninterrupted one does; the metrics endpoint serves every metric docs/trainer.md lists, with
values that match what the run did; bad setups fail fast with exit code 2 and a useful line.

Ranks are started from a multiprocessing *forkserver* that has imported torch once: each rank is
the real CLI entry point (``dpjob_trainer.__main__.main``) with its own environment, stdout and
exit code, but without paying a multi-second torch import per rank on a 2-core machine. Tests
that check the fail-before-importing-torch path use a plain subprocess.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.waits import wait_until

pytestmark = pytest.mark.e2e

torch = pytest.importorskip("torch")
pytest.importorskip("prometheus_client")

ROOT = Path(__file__).resolve().parents[2]
CTX = mp.get_context("forkserver")
# torch._dynamo: DDP imports it lazily at construction (~900 modules, seconds per rank otherwise).
CTX.set_forkserver_preload(["torch", "torch._dynamo", "torch.distributed", "prometheus_client", "dpjob_trainer.train"])
ENV_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "RANK_TABLE_FILE", "DPJOB_BACKEND", "TORCHELASTIC_RUN_ID")


def _rank_main(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """Runs in the child: this rank's environment and log file, then the real CLI."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for key in ENV_KEYS:
        os.environ.pop(key, None)
    os.environ.update(env)
    from dpjob_trainer.__main__ import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass
class Job:
    """One launched job: its rank processes, logs, and where it writes."""

    name: str
    world: int
    workdir: Path
    procs: list = field(default_factory=list)

    @property
    def report_dir(self) -> Path:
        return self.workdir / "report"

    @property
    def checkpoint_dir(self) -> Path:
        return self.workdir / "ckpt"

    def log(self, rank: int) -> str:
        path = self.workdir / f"rank{rank}.log"
        return path.read_text() if path.exists() else ""

    def events(self, rank: int, kind: str) -> list[dict]:
        out = []
        for line in self.log(rank).splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == kind:
                    out.append(event)
        return out

    def wait(self, timeout: float = 60) -> list[int]:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            proc.join(max(deadline - time.monotonic(), 0.1))
        if any(p.exitcode is None for p in self.procs):
            for p in self.procs:
                p.kill()
            logs = "\n".join(f"--- rank {r}\n{self.log(r)[-2000:]}" for r in range(self.world))
            raise AssertionError(f"job {self.name} did not finish in {timeout}s\n{logs}")
        return [p.exitcode for p in self.procs]

    def reports(self) -> list[dict]:
        return [json.loads((self.report_dir / f"report-rank{r}.json").read_text()) for r in range(self.world)]

    def final_params(self) -> dict:
        return torch.load(self.checkpoint_dir / "checkpoint.pt", weights_only=True)["model"]


def launch(tmp_path: Path, name: str, world: int, args: list[str], *, metrics_port: int = 0,
           checkpoint_dir: Path | None = None, extra_env: dict[str, str] | None = None,
           only_rank: int | None = None) -> Job:
    """Start ``world`` ranks of the trainer as a job would: env contract, one process per rank.

    ``args`` come last so a test can override the defaults set here (argparse: last one wins).
    """
    job = Job(name, world, tmp_path / name)
    job.workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ckpt = checkpoint_dir or job.checkpoint_dir
    argv = ["--num-threads", "1", "--report", str(job.report_dir), "--checkpoint-dir", str(ckpt),
            "--metrics-port", str(metrics_port), "--metrics-addr", "127.0.0.1", "--rendezvous-timeout", "60", *args]
    for rank in range(world) if only_rank is None else [only_rank]:
        env = {"WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "DPJOB_BACKEND": "gloo", "DPJOB_NAME": name}
        if world == 1:
            env = {"DPJOB_BACKEND": "gloo"}  # no contract at all: the single-device baseline
        env.update(extra_env or {})
        proc = CTX.Process(target=_rank_main, args=(argv, env, str(job.workdir / f"rank{rank}.log")), daemon=True)
        proc.start()
        job.procs.append(proc)
    return job


def assert_ok(job: Job, timeout: float = 60) -> list[dict]:
    codes = job.wait(timeout)
    assert codes == [0] * job.world, (codes, [job.log(r)[-1500:] for r in range(job.world)])
    return job.reports()


# ---- OneFlow's two-rank regression, identical ranks, and the metrics endpoint -------------------

LINEAR_STEPS = 300


@pytest.fixture(scope="module")
def linear_job(tmp_path_factory):
    """2 ranks, OneFlow's data, metrics on; scraped after training while the endpoint lingers."""
    tmp = tmp_path_factory.mktemp("linear")
    port = free_port(consecutive=2)
    started = time.time()
    job = launch(tmp, "linear", 2, ["--task", "linear", "--steps", str(LINEAR_STEPS), "--lr", "0.04",
                                    "--checkpoint-every", "100", "--log-every", "50", "--metrics-linger", "60"],
                 metrics_port=port)

    def reports_written() -> bool:
        if all((job.report_dir / f"report-rank{r}.json").exists() for r in range(2)):
            return True
        if any(p.exitcode is not None for p in job.procs):
            job.wait(1)
            pytest.fail(f"linear job ended early: {[job.log(r)[-1500:] for r in range(2)]}")
        return False

    wait_until(reports_written, timeout=60, interval=0.05, what="both ranks' reports")
    scrapes = [urllib.request.urlopen(f"http://127.0.0.1:{port + r}/metrics", timeout=10).read().decode()
               for r in range(2)]
    for proc in job.procs:
        os.kill(proc.pid, signal.SIGTERM)  # ends the linger early; training already finished
    codes = job.wait(30)
    return {"job": job, "codes": codes, "scrapes": scrapes, "started": started, "ended": time.time()}


def test_linear_regression_converges_to_w_2_3_on_every_rank(linear_job):
    assert linear_job["codes"] == [0, 0]
    for report in linear_job["job"].reports():
        assert report["weights"] == pytest.approx([2.0, 3.0], abs=1e-3)
        assert report["final_loss"] < 1e-5 < report["initial_loss"]
        assert (report["steps"], report["world_size"], report["backend"]) == (LINEAR_STEPS, 2, "gloo")
        assert report["samples"] == 2 * LINEAR_STEPS  # each rank holds two of OneFlow's four samples


def test_all_ranks_end_with_identical_parameters(linear_job):
    reports = linear_job["job"].reports()
    assert reports[0]["param_sha256"] == reports[1]["param_sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", reports[0]["param_sha256"])
    assert [r["rank"] for r in reports] == [0, 1]


def _documented_metrics() -> set[str]:
    names = set(re.findall(r"`(dpjob_trainer_[a-z_]+)", (ROOT / "docs" / "trainer.md").read_text()))
    assert len(names) >= 12, names
    return names


RANK0_ONLY = {"dpjob_trainer_slowest_rank", "dpjob_trainer_slowest_rank_ratio",
              "dpjob_trainer_rank_step_seconds_median", "dpjob_trainer_straggler_rank"}


def test_metrics_endpoint_serves_every_documented_metric_with_sane_values(linear_job):
    from prometheus_client.parser import text_string_to_metric_families

    for rank, text in enumerate(linear_job["scrapes"]):
        samples = {}
        labels = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[s.name] = s.value
                labels[s.name] = s.labels
        for name in _documented_metrics() - (set() if rank == 0 else RANK0_ONLY):
            assert name in samples or f"{name}_count" in samples, f"rank {rank} does not serve {name}"
        assert labels["dpjob_trainer_info"] == {"world_size": "2", "backend": "gloo", "task": "linear",
                                                 "torch_version": torch.__version__, "rank": str(rank),
                                                 "job_name": "linear", "restart": "0"}
        assert samples["dpjob_trainer_steps_total"] == LINEAR_STEPS
        assert samples["dpjob_trainer_samples_total"] == 2 * LINEAR_STEPS
        assert samples["dpjob_trainer_step_duration_seconds_count"] == LINEAR_STEPS
        step_time = samples["dpjob_trainer_step_duration_seconds_sum"]
        assert 0 < step_time < linear_job["ended"] - linear_job["started"]
        assert 0 < samples["dpjob_trainer_data_wait_seconds_total"] < step_time
        # Two ranks really all-reduce: some communication is exposed, and it is part of the step.
        assert 0 < samples["dpjob_trainer_comm_exposed_seconds_total"] < step_time
        assert 0 <= samples["dpjob_trainer_loss"] < 1e-5
        assert samples["dpjob_trainer_learning_rate"] == pytest.approx(0.04)
        assert 0 <= samples["dpjob_trainer_grad_norm"] < 1e-2 and math.isfinite(samples["dpjob_trainer_grad_norm"])
        assert samples["dpjob_trainer_epoch"] == LINEAR_STEPS - 1  # one global batch per epoch
        assert linear_job["started"] <= samples["dpjob_trainer_last_step_timestamp_seconds"] <= linear_job["ended"]
        # checkpoints at steps 100 and 200, and the final one at 300
        assert samples["dpjob_trainer_checkpoint_duration_seconds_count"] == 3
        assert samples["dpjob_trainer_checkpoint_duration_seconds_sum"] > 0


# ---- the data-parallel promise -------------------------------------------------------------------

def test_n_ranks_with_batch_b_equal_one_process_with_batch_n_times_b(tmp_path):
    """Including an uneven last batch (19 samples) and ranks that only hold padding (3 ranks)."""
    common = ["--task", "mlp", "--dataset-size", "19", "--lr", "0.5", "--log-every", "0"]
    jobs = {
        "2x4": launch(tmp_path, "2x4", 2, [*common, "--batch-size", "4", "--steps", "4"]),
        "1x8": launch(tmp_path, "1x8", 1, [*common, "--batch-size", "8", "--steps", "4"]),
        "3x3": launch(tmp_path, "3x3", 3, [*common, "--batch-size", "3", "--steps", "3"]),
        "1x9": launch(tmp_path, "1x9", 1, [*common, "--batch-size", "9", "--steps", "3"]),
        "2x2acc2": launch(tmp_path, "2x2acc2", 2, [*common, "--batch-size", "2", "--grad-accum", "2", "--steps", "4"]),
    }
    reports = {name: assert_ok(job) for name, job in jobs.items()}
    params = {name: job.final_params() for name, job in jobs.items()}
    for many, one in [("2x4", "1x8"), ("3x3", "1x9"), ("2x2acc2", "1x8")]:
        for key in params[one]:
            torch.testing.assert_close(params[many][key], params[one][key], rtol=1e-5, atol=1e-6)
        assert reports[many][0]["final_loss"] == pytest.approx(reports[one][0]["final_loss"], rel=1e-5)
        assert reports[many][0]["initial_loss"] == pytest.approx(reports[one][0]["initial_loss"], rel=1e-5)
        assert len({r["param_sha256"] for r in reports[many]}) == 1
    # Every sample counted once: 3 steps of 9, 9, 1 samples over the three ranks.
    assert sum(r["samples"] for r in reports["3x3"]) == 19 == reports["1x9"][0]["samples"]
    # ...and the runs really trained (the comparison is not between two untouched models).
    assert reports["1x8"][0]["final_loss"] < reports["1x8"][0]["initial_loss"]


def test_sum_reduction_gives_n_times_the_mean_gradient(tmp_path):
    """One SGD step from w = 0 on OneFlow's data: mean gives -lr * grad, sum twice that."""
    args = ["--task", "linear", "--steps", "1", "--lr", "0.01", "--log-every", "0"]
    mean = launch(tmp_path, "mean", 2, [*args, "--grad-reduction", "mean"])
    total = launch(tmp_path, "sum", 2, [*args, "--grad-reduction", "sum"])
    mean_w = [r["weights"] for r in assert_ok(mean)]
    sum_w = [r["weights"] for r in assert_ok(total)]
    # d/dw mean((x.w - y)^2) at w = 0 over all four samples is -2/4 * sum(x*y) = [-82.5, -110].
    assert mean_w[0] == mean_w[1] == pytest.approx([0.825, 1.1], rel=1e-6)
    assert sum_w[0] == sum_w[1] == pytest.approx([2 * 0.825, 2 * 1.1], rel=1e-6)


# ---- preemption ----------------------------------------------------------------------------------

def test_sigterm_checkpoints_and_resume_equals_uninterrupted_run(tmp_path):
    args = ["--task", "mlp", "--steps", "1000", "--batch-size", "16", "--momentum", "0.9", "--lr", "0.05",
            "--log-every", "10"]
    straight = launch(tmp_path, "straight", 2, args)
    shared_ckpt = tmp_path / "preempted-ckpt"
    first = launch(tmp_path, "first", 2, args, checkpoint_dir=shared_ckpt)

    def past_step_50() -> bool:
        if any(e["step"] >= 50 for e in first.events(1, "step")):
            return True
        assert all(p.exitcode is None for p in first.procs), first.log(1)[-1500:]
        return False

    wait_until(past_step_50, timeout=60, interval=0.02, what="rank 1 past step 50")
    os.kill(first.procs[1].pid, signal.SIGTERM)  # only rank 1's pod is preempted: both must stop together
    assert first.wait(60) == [143, 143], [first.log(r)[-1500:] for r in range(2)]
    stopped = first.reports()
    assert stopped[0]["preempted"] and stopped[1]["preempted"]
    saved_step = stopped[0]["steps"]
    assert stopped[1]["steps"] == saved_step and 50 <= saved_step < 1000
    assert torch.load(shared_ckpt / "checkpoint.pt", weights_only=True)["step"] == saved_step
    assert [e["reason"] for e in first.events(0, "checkpoint")] == ["sigterm"]

    resumed = launch(tmp_path, "resumed", 2, args, checkpoint_dir=shared_ckpt)
    done = assert_ok(resumed)
    reference = assert_ok(straight)
    assert done[0]["resumed_from_step"] == saved_step and done[0]["steps"] == 1000
    assert resumed.events(0, "start")[0]["start_step"] == saved_step
    assert {r["param_sha256"] for r in done} == {reference[0]["param_sha256"]}
    assert done[0]["final_loss"] == reference[0]["final_loss"]


# ---- torchrun ------------------------------------------------------------------------------------

def test_runs_under_torchrun(tmp_path):
    """procsPerReplica > 1 pods launch us through torchrun: its env and its store must just work."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "trainer-image"), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
         "-m", "dpjob_trainer", "--task", "linear", "--steps", "300", "--lr", "0.04", "--metrics-port", "0",
         "--num-threads", "1", "--log-every", "0", "--report", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    reports = [json.loads((tmp_path / f"report-rank{r}.json").read_text()) for r in range(2)]
    assert [r["world_size"] for r in reports] == [2, 2]
    assert reports[0]["param_sha256"] == reports[1]["param_sha256"]
    assert reports[0]["weights"] == pytest.approx([2.0, 3.0], abs=1e-3)


# ---- failures the user must be able to diagnose --------------------------------------------------

def _cli(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "trainer-image"), full_env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "dpjob_trainer", "--metrics-port", "0", *args], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"RANK": "1"}, "WORLD_SIZE is missing"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"}, "RANK must be in [0, WORLD_SIZE-1]"),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29500"}, "MASTER_ADDR"),
    ],
)
def test_invalid_environment_fails_fast_with_exit_2_and_one_line(env, needle):
    started = time.monotonic()
    result = _cli(env)
    assert result.returncode == 2
    assert result.stderr.startswith("dpjob-trainer: error: ") and needle in result.stderr
    assert result.stderr.count("\n") == 1
    assert time.monotonic() - started < 10  # torch is not even imported


def test_a_rank_slowed_by_a_sleep_is_reported_as_the_straggler(tmp_path):
    """Every rank's own step time travels in the step's all-reduce; rank 0 names the slow one.

    Step s carries every rank's own time of step s-1. Step 2's own times are all alike: DDP
    rebuilds its buckets there, a collective outside the comm hook, so the fast ranks' wait for
    the slow one counts as their own time. The three-step streak therefore starts at step 4 and
    names the straggler at step 6 on a quiet host (step 4 is the earliest any run can). The
    sleep is long against scheduler noise (on a loaded 2-core host, where these tests run at a
    lower priority than the cluster's, a fast rank can lose the CPU for tens of milliseconds and
    break a streak), and three noisy steps are allowed on top; the detector's table in
    tests/unit/test_trainer_stragglers.py owns the window.
    """
    slow = 0.3
    job = launch(tmp_path, "slow", 3, ["--task", "linear", "--steps", "12", "--slow-rank", "2",
                                       "--slow-seconds", str(slow), "--checkpoint-every", "0"])
    assert_ok(job)
    found = job.events(0, "straggler")
    assert found and found[0]["slow_rank"] == 2 and found[0]["ratio"] >= 1.5, found
    assert found[0]["own_seconds"] >= slow > found[0]["median_seconds"]  # rank 2's sleep is in what it sent
    assert 4 <= found[0]["step"] <= 9, found
    assert not job.events(1, "straggler") and not job.events(2, "straggler")  # rank 0 speaks for the gang


def test_ranks_at_the_same_pace_have_no_straggler(tmp_path):
    job = launch(tmp_path, "even", 2, ["--task", "linear", "--steps", "12", "--checkpoint-every", "0"])
    assert_ok(job)
    assert not job.events(0, "straggler")


def test_rank_table_that_never_completes_is_named_in_the_error(tmp_path):
    """hccl reads the table at communicator init, so the trainer waits for it, within a deadline."""
    table = tmp_path / "ranktable.json"
    table.write_text('{"status": "initializing"}')
    result = _cli({"RANK_TABLE_FILE": str(table), "DPJOB_BACKEND": "hccl"}, "--rank-table-timeout", "1")
    assert result.returncode == 2
    assert str(table) in result.stderr and "'initializing'" in result.stderr


def test_rank_table_completed_late_then_training_runs(tmp_path):
    table = tmp_path / "ranktable.json"
    table.write_text('{"status": "initializing"}')
    job = launch(tmp_path, "ranktable", 1, ["--task", "linear", "--steps", "5", "--rank-table-wait", "always"],
                 extra_env={"RANK_TABLE_FILE": str(table)})
    wait = wait_until(lambda: job.events(0, "ranktable_wait"), timeout=60, what="rank 0 waiting for the table")
    assert wait[0]["status"] == "initializing" and wait[0]["file"] == str(table)
    assert job.procs[0].exitcode is None and not job.events(0, "start")  # still waiting for the table
    table.write_text('{"status": "completed", "ranks": []}')
    assert assert_ok(job)[0]["steps"] == 5


def test_gloo_ranks_do_not_wait_for_a_rank_table_they_never_read(tmp_path):
    """A kubelet refreshes the mounted table only on its ~1 min pod sync: waiting cost every start that."""
    table = tmp_path / "ranktable.json"
    table.write_text('{"status": "initializing"}')
    job = launch(tmp_path, "nowait", 2, ["--task", "linear", "--steps", "5"], extra_env={"RANK_TABLE_FILE": str(table)})
    assert [r["steps"] for r in assert_ok(job)] == [5, 5]


def test_rendezvous_timeout_names_the_address_it_waited_for(tmp_path):
    job = launch(tmp_path, "lonely", 2, ["--task", "linear", "--rendezvous-timeout", "2"], only_rank=1)
    assert job.wait(60) == [2]  # rank 0 never shows up
    error = job.log(1).strip().splitlines()[-1]
    assert error.startswith("dpjob-trainer: error: rendezvous at MASTER_ADDR:MASTER_PORT=127.0.0.1:")
    assert "timed out after 2s" in error and "--rendezvous-timeout" in error
