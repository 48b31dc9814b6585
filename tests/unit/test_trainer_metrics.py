"""The metric set and the CLI surface: names, types, and flags that reach the loop."""

from __future__ import annotations

import pytest

from dpjob_trainer.__main__ import build_parser
from tests.support.waits import wait_until

pytestmark = pytest.mark.unit


def test_every_metric_is_exposed_with_its_type():
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from dpjob_trainer.metrics import METRIC_NAMES, TrainerMetrics

    m = TrainerMetrics()
    m.set_info(world_size="2", backend="gloo", torch_version="x", task="mlp", rank="0")
    m.observe_step(duration=0.02, samples=32, data_wait=0.001, comm_exposed=0.002, loss=1.5,
                   learning_rate=0.1, grad_norm=3.0, epoch=1, timestamp=1e9, step=7, global_samples=64)
    m.observe_checkpoint(0.3)
    m.set_total_steps(100)
    m.set_checkpoint(5, 1e9)
    from dpjob_trainer.stragglers import StepTimes

    m.set_step_times(StepTimes(slowest_rank=1, slowest_seconds=0.03, median_seconds=0.01, straggler=1))
    from dpjob_trainer.handshake import WarmCause

    m.set_warm_restarts(1)
    m.set_warm_cause(WarmCause(rank=1, exit_code=137, failed_at=1e9))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    types = {
        "dpjob_trainer_step_duration_seconds": "histogram",
        "dpjob_trainer_checkpoint_duration_seconds": "histogram",
        "dpjob_trainer_steps": "counter",  # the parser strips _total from counter family names
        "dpjob_trainer_samples": "counter",
        "dpjob_trainer_loss": "gauge",
        "dpjob_trainer_info": "gauge",
    }
    for name, kind in types.items():
        assert families[name].type == kind
    exposed = {s.name for f in families.values() for s in f.samples}
    for name in METRIC_NAMES:
        assert name in exposed or f"{name}_count" in exposed, name


def test_every_train_config_field_has_a_flag():
    pytest.importorskip("torch")
    from dpjob_trainer.config import TrainConfig

    dests = {a.dest for a in build_parser()._actions}
    assert set(TrainConfig.__dataclass_fields__) <= dests


def test_flag_defaults():
    args = build_parser().parse_args([])
    assert args.metrics_port == 9090 and args.grad_reduction == "mean" and args.rank_table_timeout == 600
    assert args.tail == "keep" and args.grad_accum == 1 and args.resume is True
    assert args.nonfinite == "stop" and args.max_nonfinite_steps == 3 and args.inject_nan_at_step == 0


def _scrape(m) -> dict[str, float]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(m.registry).decode()
    return {(s.name + (f"{{le={s.labels['le']}}}" if "le" in s.labels else "")): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_histogram_buckets_are_cumulative_and_counters_accumulate():
    pytest.importorskip("prometheus_client")
    from dpjob_trainer.metrics import TrainerMetrics

    m = TrainerMetrics()
    for duration in (0.0005, 0.001, 0.003, 100.0):  # 0.001 sits exactly on a bound: le is inclusive
        m.observe_step(duration=duration, samples=8, data_wait=0.5, comm_exposed=0.25, loss=2.0,
                       learning_rate=0.1, grad_norm=1.0, epoch=0, timestamp=1.0, step=1, global_samples=16)
    s = _scrape(m)
    assert s["dpjob_trainer_step_duration_seconds_bucket{le=0.001}"] == 2
    assert s["dpjob_trainer_step_duration_seconds_bucket{le=0.005}"] == 3
    assert s["dpjob_trainer_step_duration_seconds_bucket{le=60.0}"] == 3
    assert s["dpjob_trainer_step_duration_seconds_bucket{le=+Inf}"] == 4
    assert s["dpjob_trainer_step_duration_seconds_count"] == 4
    assert s["dpjob_trainer_step_duration_seconds_sum"] == pytest.approx(100.0045)
    assert s["dpjob_trainer_samples_total"] == 32 and s["dpjob_trainer_steps_total"] == 4
    assert s["dpjob_trainer_data_wait_seconds_total"] == 2.0
    assert s["dpjob_trainer_comm_exposed_seconds_total"] == 1.0


def test_step_gauges_are_absent_until_the_first_step():
    """A fake loss of 0 before training would look like perfect convergence on a dashboard."""
    pytest.importorskip("prometheus_client")
    from dpjob_trainer.metrics import TrainerMetrics

    s = _scrape(TrainerMetrics())
    assert s["dpjob_trainer_steps_total"] == 0
    assert "dpjob_trainer_loss" not in s and "dpjob_trainer_last_step_timestamp_seconds" not in s


def test_progress_contract_series_carry_the_global_step_total_and_checkpoint():
    """What the operator reads from rank 0 for status.progress (docs/api.md, "Progress reporting")."""
    pytest.importorskip("prometheus_client")
    from dpjob_trainer.metrics import TrainerMetrics

    m = TrainerMetrics()
    m.set_total_steps(600)
    m.set_checkpoint(500, None)  # resumed from a checkpoint of unknown age: step only
    s = _scrape(m)
    assert s["dpjob_trainer_total_steps"] == 600 and s["dpjob_trainer_checkpoint_step"] == 500
    assert "dpjob_trainer_checkpoint_timestamp_seconds" not in s
    assert "dpjob_trainer_step" not in s and "dpjob_trainer_first_step" not in s, \
        "the step must not appear before this process's first step"
    for step in (501, 502):
        m.observe_step(duration=0.1, samples=8, data_wait=0.0, comm_exposed=0.0, loss=0.5, learning_rate=0.1,
                       grad_norm=1.0, epoch=3, timestamp=1000.0 + step, step=step, global_samples=16)
    m.set_checkpoint(502, 2000.0)
    s = _scrape(m)
    assert s["dpjob_trainer_step"] == 502, "the step counts the steps before the resume"
    assert s["dpjob_trainer_steps_total"] == 2, "the counter counts this process's steps only"
    assert s["dpjob_trainer_global_samples_total"] == 32
    assert s["dpjob_trainer_last_step_timestamp_seconds"] == 1502.0
    assert s["dpjob_trainer_checkpoint_step"] == 502 and s["dpjob_trainer_checkpoint_timestamp_seconds"] == 2000.0
    # goodput: where this process picked up (its first step) and when it stepped first
    assert (s["dpjob_trainer_first_step"], s["dpjob_trainer_first_step_timestamp_seconds"]) == (501, 1501.0)


def test_metrics_port_defaults_to_the_port_the_operator_names(monkeypatch):
    monkeypatch.setenv("DPJOB_METRICS_PORT", "9400")
    assert build_parser().parse_args([]).metrics_port == 9400
    assert build_parser().parse_args(["--metrics-port", "0"]).metrics_port == 0


def _run_in_process(tmp_path, restart_count: str, *, sigterm_once_hung: bool):
    """A one-process trainer run with live metrics. With ``sigterm_once_hung``, SIGTERM's flag is set
    once the trainer logged its hang (it takes no step after that line); returns (exit code, the
    scrape made just before, log)."""
    import io
    import threading

    from dpjob_trainer.config import TrainConfig
    from dpjob_trainer.env import parse_env
    from dpjob_trainer.metrics import TrainerMetrics
    from dpjob_trainer.stop_flag import StopFlag
    from dpjob_trainer.train import Trainer

    env = parse_env({"DPJOB_RESTART_COUNT": restart_count, "DPJOB_NAME": "hang"})
    metrics, stop, out = TrainerMetrics(), StopFlag(), io.StringIO()
    cfg = TrainConfig(task="linear", steps=20, log_every=0, hang_after_step=5,
                      checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2)
    seen: list[dict[str, float]] = []

    def sigterm_when_hung() -> None:
        try:
            wait_until(lambda: '"event": "hang"' in out.getvalue(), timeout=60, interval=0.05,
                       what="the trainer's hang line")
            seen.append(_scrape(metrics))
        finally:
            stop.requested = True  # a trainer that never hung must not block the test either

    watcher = threading.Thread(target=sigterm_when_hung, daemon=True)
    if sigterm_once_hung:
        watcher.start()
    code = Trainer(cfg, env, metrics, stop, out=out).run()
    return code, seen[-1] if seen else _scrape(metrics), out.getvalue()


def test_hang_after_step_stops_stepping_but_keeps_reporting_until_sigterm(tmp_path):
    """The e2e stall test's trainer: the first gang stops at step 5 with its metrics still served."""
    pytest.importorskip("torch")
    code, s, log = _run_in_process(tmp_path, restart_count="0", sigterm_once_hung=True)
    assert code == 143 and '"event": "hang"' in log
    assert s["dpjob_trainer_step"] == 5 and s["dpjob_trainer_total_steps"] == 20
    assert s["dpjob_trainer_checkpoint_step"] == 4, "the last checkpoint before the hang"
    assert s["dpjob_trainer_checkpoint_timestamp_seconds"] > 0


def test_hang_after_step_spares_a_restarted_gang_which_resumes_and_finishes(tmp_path):
    pytest.importorskip("torch")
    _run_in_process(tmp_path, restart_count="0", sigterm_once_hung=True)
    code, s, log = _run_in_process(tmp_path, restart_count="1", sigterm_once_hung=False)
    assert code == 0 and '"event": "hang"' not in log
    assert s["dpjob_trainer_step"] == 20 and s["dpjob_trainer_steps_total"] == 16, "resumed from step 4"
