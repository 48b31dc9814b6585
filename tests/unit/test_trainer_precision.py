"""``--precision``: every precision trains on CPU, the report says which one ran, and under fp16
a gradient overflow is the loss scaler's business (the update is skipped and counted, the run goes
on) while a NaN loss, or a gradient that stays non-finite once the scaler has backed off, is the
``--nonfinite`` policy's as in float32. Tiny in-process runs: a few seconds."""

from __future__ import annotations

import itertools

import pytest

from tests.support.trainer import run_trainer_in_process

pytestmark = pytest.mark.unit
pytest.importorskip("torch")

from dpjob_trainer import train as train_mod  # noqa: E402 - needs torch, skipped above without it
from dpjob_trainer.agreement import read_agreement  # noqa: E402
from dpjob_trainer.nonfinite import EXIT_NONFINITE  # noqa: E402
from dpjob_trainer.precision import requested_precision  # noqa: E402

NAN, INF = float("nan"), float("inf")


# values: loss sum, stop votes, ranks with a bad loss, bad gradient flag (x ranks), [own times], grad norm, scale
@pytest.mark.parametrize(("values", "own", "scaling", "nonfinite_ranks", "scaler_skip"), [
    ([3.0, 0, 0, 0, 1.5, 1.0], 0, False, 0, False),           # fp32, all finite: apply
    ([NAN, 0, 1, 0, 1.5, 1.0], 0, False, 1, False),           # one rank's loss is NaN: the policy's
    ([3.0, 0, 0, 2, INF, 1.0], 0, False, 2, False),           # fp32 gradient Inf: the policy's, every rank
    ([3.0, 0, 0, 2, INF, 65536.0], 0, True, 0, True),         # fp16 overflow at scale 65536: the scaler's
    ([3.0, 0, 0, 2, NAN, 1.0], 0, True, 0, True),             # still the scaler's at scale 1
    ([3.0, 0, 0, 2, NAN, 0.5], 0, True, 2, False),            # non-finite even below scale 1: the policy's
    ([NAN, 0, 1, 2, NAN, 65536.0], 0, True, 1, False),        # fp16 NaN loss: the policy's, as in fp32
    ([3.0, 1, 0, 0, 0.1, 0.2, 1.5, 1.0], 2, False, 0, False),  # own times ride along
])
def test_the_step_decision_every_rank_reads_from_the_all_reduce(values, own, scaling, nonfinite_ranks, scaler_skip):
    agreed = read_agreement(values, 2, own, loss_scaling=scaling)
    assert (agreed.nonfinite_ranks, agreed.scaler_skip) == (nonfinite_ranks, scaler_skip)
    assert agreed.apply_update is (nonfinite_ranks == 0 and not scaler_skip)
    assert agreed.own_seconds == values[4:4 + own] and str(agreed.grad_norm) == str(values[-2])


@pytest.mark.parametrize(("precision", "amp", "expected"), [
    ("fp32", False, "fp32"), ("bf16", False, "bf16"), ("fp16", False, "fp16"), ("fp32", True, "bf16"),
    ("fp16", True, "--amp means --precision bf16"), ("fp8", False, "--precision must be fp32, bf16 or fp16"),
])
def test_precision_flags(precision, amp, expected):
    if expected.startswith("-"):
        with pytest.raises(ValueError, match=expected):
            requested_precision(precision, amp)
    else:
        assert requested_precision(precision, amp) == expected


MLP = ["--task", "mlp", "--dataset-size", "64", "--batch-size", "16", "--steps", "8"]


@pytest.fixture(scope="module")
def fp32_loss(tmp_path_factory):
    report_dir = tmp_path_factory.mktemp("fp32")
    return run_trainer_in_process(report_dir, MLP)[2]["final_loss"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_each_precision_trains_on_cpu_and_is_reported(tmp_path, fp32_loss, precision):
    code, events, report = run_trainer_in_process(tmp_path, [*MLP, "--precision", precision])
    assert code == 0 and report["precision"] == precision and report["amp"] is True
    assert events[0]["precision"] == precision
    assert report["final_loss"] == pytest.approx(fp32_loss, rel=0.05)  # the same training, less exact


def _gradient_hook(monkeypatch, bad_from: int, value: float) -> None:
    """Step ``bad_from`` on (1-based): the gradient of the model's first parameter becomes ``value``."""
    backward = itertools.count(1)
    real_build_task = train_mod.build_task

    def build_task(*args, **kwargs):
        task = real_build_task(*args, **kwargs)
        next(task.model.parameters()).register_hook(lambda g: g * value if next(backward) >= bad_from else g)
        return task

    monkeypatch.setattr(train_mod, "build_task", build_task)


def test_an_fp16_overflow_is_skipped_by_the_scaler_and_the_run_goes_on(tmp_path, monkeypatch):
    _gradient_hook(monkeypatch, 3, INF)
    code, events, report = run_trainer_in_process(tmp_path, [*MLP, "--precision", "fp16"])
    assert code == 0 and report["skipped_steps"] == 0  # --nonfinite stop (default) did not fire
    assert report["scaler_skipped_steps"] == 6 and report["steps"] == 8
    assert not [e for e in events if e["event"].startswith("nonfinite")]


def test_a_gradient_that_stays_non_finite_stops_the_run_once_the_scaler_backed_off(tmp_path, monkeypatch):
    _gradient_hook(monkeypatch, 2, NAN)
    code, events, report = run_trainer_in_process(tmp_path, [*MLP[:-1], "40", "--precision", "fp16"])
    # 65536 halves 17 times to 0.5: steps 2..18 are the scaler's, step 19 is the policy's.
    assert code == EXIT_NONFINITE and report["scaler_skipped_steps"] == 17
    assert [e["step"] for e in events if e["event"] == "nonfinite_stop"] == [19]


def test_an_fp16_nan_loss_is_still_a_non_finite_failure(tmp_path):
    code, events, report = run_trainer_in_process(tmp_path, ["--task", "linear", "--precision", "fp16",
                                                             "--steps", "6", "--inject-nan-at-step", "3"])
    assert code == EXIT_NONFINITE and report["steps"] == 2
    assert [e["step"] for e in events if e["event"] == "nonfinite_stop"] == [3]


def test_an_fp16_run_resumes_bit_identical_with_its_loss_scale(tmp_path):
    args = [*MLP[:-2], "--precision", "fp16", "--steps"]
    for name in ("straight", "first", "resumed"):
        (tmp_path / name).mkdir()
    straight = run_trainer_in_process(tmp_path / "straight", [*args, "8"])[2]
    ckpt = ["--checkpoint-dir", str(tmp_path / "ckpt")]
    assert run_trainer_in_process(tmp_path / "first", [*args, "4", *ckpt])[0] == 0
    code, _, resumed = run_trainer_in_process(tmp_path / "resumed", [*args, "8", *ckpt])
    assert code == 0 and resumed["resumed_from_step"] == 4
    assert resumed["param_sha256"] == straight["param_sha256"]


def test_fp16_without_float16_autocast_on_the_device_is_one_line_and_exit_2(monkeypatch, capsys):
    from dpjob_trainer import precision
    from dpjob_trainer.__main__ import main

    monkeypatch.setattr(precision, "_fp16_autocasts", lambda device: False)
    for key in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    assert main(["--task", "linear", "--steps", "1", "--metrics-port", "0", "--precision", "fp16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"dpjob-trainer: error: --precision fp16: torch {precision.torch.__version__} has no float16 "
                   "autocast on cpu; use --precision bf16 or fp32"]
