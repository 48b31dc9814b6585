"""status.progress: what rank 0 reports, how it becomes the PROGRESS and ETA columns, and how often
it is written (at most every PROGRESS_SECONDS per job, whatever the number of ranks)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.progress import (
    PROGRESS_SECONDS,
    ProgressReport,
    ProgressView,
    advance,
    refusal,
    report_from_samples,
    step_time,
)
from dpjob_operator.api.timestamps import iso
from dpjob_operator.builders.env import build_rank_env, metrics_port
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.reconcile.planner import plan_job
from dpjob_operator.reconcile.progress import human_duration, progress_status
from tests.support.builders import JobBuilder, pod
from tests.support.clocks import FakeClock, ManualSleep
from tests.support.podenv import rank_env
from tests.support.waits import wait_until

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
T = NOW.timestamp()


def report(step: int, at: float, restart: int = 0, **kw) -> ProgressReport:
    return ProgressReport(restart=restart, observed_at=at, step=step, last_step_time=at, **kw)


def running(restarts: int = 0, **extra) -> dict:
    return {"phase": "Running", "reason": "AllRanksRunning", "restarts": restarts, "startTime": iso(NOW),
            "conditions": [{"type": "Running", "status": "True", "reason": "AllRanksRunning",
                            "lastTransitionTime": iso(NOW - timedelta(hours=1))}], **extra}


def plan(status: dict, view: ProgressView | None, now: datetime = NOW, builder: JobBuilder | None = None):
    job = (builder or JobBuilder()).job()
    gen = int(status.get("restarts", 0))
    return plan_job(job, status, [pod(0, restart=gen), pod(1, restart=gen)], now, DEFAULT_POOLS["cpu"],
                    progress=view)


# ---- the report: what the operator takes from rank 0's samples -----------------------------------

def test_no_report_before_the_first_step():
    """A gauge at 0 (a fresh prometheus_client Gauge) or no gauge at all is "not started"."""
    assert report_from_samples({}, 0, T) is None
    assert report_from_samples({"dpjob_trainer_step": 0, "dpjob_trainer_total_steps": 100}, 0, T) is None


def test_report_takes_every_contract_series_and_drops_values_json_cannot_carry():
    rep = report_from_samples({
        "dpjob_trainer_step": 420, "dpjob_trainer_total_steps": 1000, "dpjob_trainer_loss": float("nan"),
        "dpjob_trainer_epoch": 3, "dpjob_trainer_global_samples_total": 13440,
        "dpjob_trainer_checkpoint_step": 400, "dpjob_trainer_checkpoint_timestamp_seconds": T * 1000,  # ms: wrong
        "dpjob_trainer_last_step_timestamp_seconds": T - 1}, restart=2, observed_at=T)
    assert (rep.step, rep.total_steps, rep.epoch, rep.global_samples, rep.checkpoint_step) == (420, 1000, 3, 13440, 400)
    assert rep.restart == 2 and rep.last_step_time == T - 1
    assert rep.loss is None, "a NaN loss would make the status patch invalid JSON"
    assert rep.checkpoint_time is None, "a millisecond timestamp is not a time"


@pytest.mark.parametrize("reported, since, expected", [
    (T - 3, T - 10, T - 3),     # clocks agree: the trainer's time
    (T - 60, T - 10, T - 10),   # the node's clock is a minute behind: not before the read that missed it
    (T + 60, T - 10, T),        # ahead: not after the read that saw it
    (None, T - 10, T),          # not served: the read's time
    (T - 600, None, T - 600),   # first read of this gang: nothing to bound it by
])
def test_step_time_is_the_trainers_clamped_into_the_window_the_step_happened_in(reported, since, expected):
    assert step_time(reported, T, since) == expected


def test_a_report_for_another_job_or_gang_is_refused_and_absent_labels_are_fine():
    assert refusal({"job_name": "other", "restart": "0"}, "train", 0) == \
        "dpjob_trainer_info names job 'other', not 'train'"
    assert "gang restart 1, not 2" in refusal({"job_name": "train", "restart": "1"}, "train", 2)
    assert refusal({"job_name": "train", "restart": "2", "rank": "0"}, "train", 2) is None
    assert refusal({}, "train", 2) is None


def test_the_rate_base_moves_only_when_the_step_moves_and_a_step_keeps_its_first_time():
    view = ProgressView(0, T - 100)
    view = advance(view, report(10, T - 30))
    view = advance(view, report(10, T - 20))
    assert view.latest.last_step_time == T - 30 and view.base is None
    view = advance(view, report(30, T - 10))
    assert (view.base.step, view.latest.step) == (10, 30)
    view = advance(view, report(5, T))  # a script that restarted in place: no rate across it
    assert view.base is None and view.latest.step == 5


# ---- the status object: PROGRESS, ETA and the rates ---------------------------------------------

def test_percent_rate_eta_and_the_columns():
    base = report(400, T - 20, global_samples=12800)
    rep = report(420, T - 10, total_steps=1000, loss=0.123456789, global_samples=13440, checkpoint_step=400,
                 checkpoint_time=T - 15)
    st = progress_status(rep, base, {}, NOW)
    assert st["summary"] == "420/1000 (42%)" and st["percent"] == 42
    assert st["stepsPerSecond"] == 2.0 and st["samplesPerSecond"] == 64.0
    # 580 steps left at 2 steps/s after the last step at T-10: due at T+280, 4m40s from now.
    assert st["eta"] == iso(NOW + timedelta(seconds=280)) and st["remaining"] == "4m40s"
    assert st["loss"] == 0.123457 and st["checkpointStep"] == 400
    assert st["checkpointTime"] == iso(NOW - timedelta(seconds=15))
    assert st["lastStepTime"] == iso(NOW - timedelta(seconds=10))


def test_without_a_total_the_column_shows_the_step_and_there_is_no_eta():
    st = progress_status(report(420, T - 10), report(400, T - 20), {}, NOW)
    assert st["summary"] == "step 420" and st["stepsPerSecond"] == 2.0
    assert not {"percent", "eta", "remaining", "totalSteps"} & set(st)


def test_after_an_operator_restart_the_written_rate_still_gives_an_eta():
    old = {"restart": 0, "step": 400, "stepsPerSecond": 4.0}
    st = progress_status(report(420, T, total_steps=500), None, old, NOW)
    assert st["remaining"] == "20s"
    other_gang = progress_status(report(420, T, total_steps=500), None, {**old, "restart": 1}, NOW)
    assert "remaining" not in other_gang, "a rate of another gang says nothing about this one"


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (45.4, "45s"), (119, "119s"), (450, "7m30s"), (600, "10m"),
                                           (2520, "42m"), (18720, "5h12m"), (18000, "5h"), (273600, "3d4h")])
def test_remaining_reads_like_kubectl_ages(seconds, text):
    assert human_duration(seconds) == text


# ---- throttling: how often the status is written -------------------------------------------------

def test_first_report_is_written_and_the_same_step_again_writes_nothing():
    view = ProgressView(0, T - 60, report(10, T - 1, total_steps=100))
    first = plan(running(), view)
    assert first.status["progress"]["step"] == 10
    again = plan(first.status, view, NOW + timedelta(seconds=30))
    assert again.status == first.status, "an unchanged step must not cost an API write"


def test_a_moving_step_is_written_at_most_every_progress_seconds():
    written = plan(running(), ProgressView(0, T - 60, report(10, T))).status
    soon = NOW + timedelta(seconds=PROGRESS_SECONDS - 1)
    moved = ProgressView(0, T - 60, report(20, soon.timestamp()), report(10, T))
    assert plan(written, moved, soon).status == written
    later = NOW + timedelta(seconds=PROGRESS_SECONDS)
    moved = ProgressView(0, T - 60, report(30, later.timestamp()), report(10, T))
    assert plan(written, moved, later).status["progress"]["step"] == 30


def test_a_pass_that_writes_anyway_takes_the_latest_progress_along():
    written = plan(running(), ProgressView(0, T - 60, report(10, T))).status
    soon = NOW + timedelta(seconds=1)
    view = ProgressView(0, T - 60, report(11, soon.timestamp()), report(10, T))
    # Rank 1 failed: the pass writes a restart, and with it step 11 although the throttle is closed.
    p = plan_job(JobBuilder().job(), written, [pod(0), pod(1, "Failed", exit_code=1)], soon, DEFAULT_POOLS["cpu"],
                 progress=view)
    assert p.status["phase"] == "Restarting" and p.status["progress"]["step"] == 11


def test_a_report_of_an_older_gang_is_ignored():
    status = running(restarts=1)
    assert "progress" not in plan(status, ProgressView(0, T - 60, report(10, T, restart=0))).status


def test_progress_on_a_finished_job_keeps_the_step_but_drops_the_estimate():
    written = plan(running(), ProgressView(0, T - 60, report(99, T, total_steps=100), report(98, T - 1))).status
    assert written["progress"]["remaining"] == "1s"
    done = plan_job(JobBuilder().job(), written, [pod(0, "Succeeded"), pod(1, "Succeeded")], NOW,
                    DEFAULT_POOLS["cpu"], progress=ProgressView(0, T - 60, report(100, T, total_steps=100)))
    assert done.status["phase"] == "Succeeded"
    assert done.status["progress"]["summary"] == "100/100 (100%)" and "remaining" not in done.status["progress"]


# ---- where rank 0 serves it ------------------------------------------------------------------------

def test_the_metrics_port_is_the_templates_metrics_port_else_9090_and_every_rank_is_told():
    job = JobBuilder().job()
    assert metrics_port(job) == 9090
    assert dict(build_rank_env(job, 1, 0, DEFAULT_POOLS["cpu"]))["DPJOB_METRICS_PORT"] == "9090"
    own = JobBuilder()
    own._trainer()["ports"] = [{"name": "metrics", "containerPort": 8000}]
    assert metrics_port(own.job()) == 8000
    env = rank_env(build_rank_pod(own.job(), 0, 0, DEFAULT_POOLS["cpu"]), own.job(), DEFAULT_POOLS["cpu"])
    assert env["DPJOB_METRICS_PORT"] == "8000"


# ---- the reader, against a real trainer metrics endpoint on this machine ---------------------------

def _served_trainer(job_name: str = "train", restart: str = "0"):
    from dpjob_trainer.metrics import TrainerMetrics
    from tests.support.ports import free_port

    trainer = TrainerMetrics()
    port = free_port()
    trainer.serve(port, addr="127.0.0.1")
    trainer.set_info(world_size="2", backend="gloo", torch_version="x", task="mlp", rank="0", job_name=job_name,
                     restart=restart)
    trainer.set_total_steps(100)
    return trainer, port


def _step(trainer, step: int) -> None:
    import time

    trainer.observe_step(duration=0.01, samples=8, data_wait=0.0, comm_exposed=0.0, loss=1.0 / step,
                         learning_rate=0.1, grad_norm=1.0, epoch=0, timestamp=time.time(), step=step,
                         global_samples=16)


def test_the_reader_follows_rank_zero_and_enqueues_the_job_on_a_new_step():
    pytest.importorskip("prometheus_client")
    from dpjob_operator.controller.progress import ProgressReader, Target

    trainer, port = _served_trainer()
    key = ("ns", "train")

    async def scenario():
        steps: list[tuple[str, str]] = []
        sleep = ManualSleep(FakeClock())  # each read is a step of the test: it waits for none
        reader = ProgressReader(steps.append, period=PROGRESS_SECONDS, clock=sleep.clock, sleep=sleep)
        target = Target(key, "train", 0, "127.0.0.1", port)
        view = reader.watch("uid", target)
        assert view.latest is None and view.restart == 0
        await sleep.parked()  # the first read is done
        assert steps == [] and reader.watch("uid", target).latest is None, "no step served yet"
        _step(trainer, 1)
        await sleep.step()
        assert steps == [key], "a new step enqueues the job"
        await sleep.step()
        assert steps == [key], "an unchanged read enqueues nothing"
        _step(trainer, 2)
        await sleep.step()
        view = reader.watch("uid", target)
        reader.stop()
        return steps, view, sleep.slept

    try:
        steps, view, slept = asyncio.run(scenario())
    finally:
        trainer.close()
    assert steps == [key, key], "one enqueue per new step, none per unchanged read"
    assert (view.latest.step, view.latest.total_steps, view.base.step) == (2, 100, 1)
    assert slept == [PROGRESS_SECONDS] * 4, "one read per period"


def test_the_reader_refuses_a_report_that_names_another_job_and_survives_a_dead_endpoint(caplog):
    pytest.importorskip("prometheus_client")
    from dpjob_operator.controller.progress import ProgressReader, Target
    from tests.support.ports import free_port

    trainer, port = _served_trainer(job_name="someone-else")
    _step(trainer, 7)

    async def scenario():
        steps: list[tuple[str, str]] = []
        sleep = ManualSleep(FakeClock())
        reader = ProgressReader(steps.append, period=PROGRESS_SECONDS, clock=sleep.clock, sleep=sleep)
        wrong = Target(("ns", "train"), "train", 0, "127.0.0.1", port)
        dead = Target(("ns", "dead"), "dead", 0, "127.0.0.1", free_port())
        reader.watch("a", wrong)
        reader.watch("b", dead)
        for _ in range(3):  # three reads of each
            sleep.release()
            await sleep.parked(2)
        seen = [reader.watch("a", wrong), reader.watch("b", dead)]
        reader.stop()
        return steps, seen, len(sleep.slept)

    try:
        steps, seen, reads = asyncio.run(scenario())
    finally:
        trainer.close()
    assert reads == 6 and steps == [] and [v.latest for v in seen] == [None, None]
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1, "logged once, not on every read"
    assert "train" in refusals[0] and "names job 'someone-else', not 'train'" in refusals[0]


def test_parse_contract_reads_the_trainers_own_page_and_rejects_garbage():
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest

    from dpjob_operator.controller.progress import parse_contract

    trainer, _ = _served_trainer()
    try:
        _step(trainer, 3)
        values, info = parse_contract(generate_latest(trainer.registry).decode())
    finally:
        trainer.close()
    assert values["dpjob_trainer_step"] == 3 and values["dpjob_trainer_total_steps"] == 100
    assert values["dpjob_trainer_global_samples_total"] == 16 and info["job_name"] == "train"
    assert parse_contract("dpjob_trainer_step{ not prometheus\n") is None


def test_the_helper_users_copy_from_the_docs_serves_what_the_reader_takes():
    """docs/api.md's helper, run as a user's script would run it, read the way the operator reads it."""
    pytest.importorskip("prometheus_client")
    import os
    import subprocess
    import sys
    import time

    from dpjob_operator.controller.progress import fetch_metrics, parse_contract
    from tests.support.ports import free_port
    from tests.support.progress import hanging_script

    port = free_port()
    script = hanging_script(total=40, hang_after=5, step_seconds=0.05)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "DPJOB_METRICS_PORT": str(port)},
                            stdout=subprocess.PIPE, text=True)

    def report():
        text = asyncio.run(fetch_metrics("127.0.0.1", port, 2.0))
        parsed = parse_contract(text) if text else None
        return report_from_samples(parsed[0], 0, time.time()) if parsed else None

    try:
        assert proc.stdout.readline().strip() == "hanging after step 5"  # stops stepping from here on
        rep = wait_until(report, timeout=90, what="the script's progress page")
    finally:
        proc.kill()
        proc.wait()
    assert (rep.step, rep.total_steps, rep.loss) == (5, 40, 0.2), "the script hangs at step 5"
    assert abs(rep.last_step_time - time.time()) < 30


# ---- stragglers ------------------------------------------------------------------------------------

def test_a_straggler_reaches_status_and_is_announced_once_per_rank():
    first = plan(running(), ProgressView(0, T - 60, report(10, T, straggler_rank=2, slowest_ratio=3.04)))
    assert first.status["progress"]["slowestRank"] == {"rank": 2, "ratio": 3.04}
    assert [e.reason for e in first.events] == ["Straggler"] and "rank 2" in first.events[0].message
    later = NOW + timedelta(seconds=PROGRESS_SECONDS)
    same = plan(first.status, ProgressView(0, T - 60, report(20, later.timestamp(), straggler_rank=2,
                                                             slowest_ratio=2.9), report(10, T)), later)
    assert same.status["progress"]["slowestRank"]["rank"] == 2 and "Straggler" not in [e.reason for e in same.events]
    gone = plan(same.status, ProgressView(0, T - 60, report(30, (later + timedelta(seconds=10)).timestamp()),
                                          report(20, later.timestamp())), later + timedelta(seconds=10))
    assert "slowestRank" not in gone.status["progress"]


def test_the_straggler_gauge_is_read_and_minus_one_means_none():
    values = {"dpjob_trainer_step": 5, "dpjob_trainer_straggler_rank": -1, "dpjob_trainer_slowest_rank_ratio": 1.1}
    assert report_from_samples(values, 0, T).straggler_rank is None
    values["dpjob_trainer_straggler_rank"] = 3
    rep = report_from_samples(values, 0, T)
    assert rep.straggler_rank == 3 and rep.slowest_ratio == pytest.approx(1.1)


def test_the_straggler_factor_reaches_every_rank():
    env = dict(build_rank_env(JobBuilder().run_policy(stragglerFactor=2.5).job(), 1, 0, DEFAULT_POOLS["cpu"]))
    assert env["DPJOB_STRAGGLER_FACTOR"] == "2.5"
    assert "DPJOB_STRAGGLER_FACTOR" not in dict(build_rank_env(JobBuilder().job(), 1, 0, DEFAULT_POOLS["cpu"]))
