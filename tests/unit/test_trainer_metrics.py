"""The metric set and the CLI surface: names, types, and flags that reach the loop."""

from __future__ import annotations

import pytest

from dpjob_trainer.__main__ import build_parser

pytestmark = pytest.mark.unit


def test_every_metric_is_exposed_with_its_type():
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from dpjob_trainer.metrics import METRIC_NAMES, TrainerMetrics

    m = TrainerMetrics()
    m.set_info(world_size="2", backend="gloo", torch_version="x", task="mlp", rank="0")
    m.observe_step(duration=0.02, samples=32, data_wait=0.001, comm_exposed=0.002, loss=1.5,
                   learning_rate=0.1, grad_norm=3.0, epoch=1, timestamp=1e9)
    m.observe_checkpoint(0.3)
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
    from dpjob_trainer.train import TrainConfig

    dests = {a.dest for a in build_parser()._actions}
    assert set(TrainConfig.__dataclass_fields__) <= dests


def test_flag_defaults():
    args = build_parser().parse_args([])
    assert args.metrics_port == 9090 and args.grad_reduction == "mean" and args.rank_table_timeout == 600
    assert args.tail == "keep" and args.grad_accum == 1 and args.resume is True


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
                       learning_rate=0.1, grad_norm=1.0, epoch=0, timestamp=1.0)
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
