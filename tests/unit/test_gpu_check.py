"""bench/gpu_check.py's arithmetic: steps/s from each loop's own lines, the median after warm-up,
and the ratio rows it prints; plus the one line it prints instead of a traceback when the machine
has no GPU. The real run (torchrun, gloo, tiny) is tests/e2e/test_gpu_check.py."""

from __future__ import annotations

import json

import pytest

from bench import gpu_check

pytestmark = pytest.mark.unit


def _lines(*events: dict) -> str:
    return "\n".join(["not json: torchrun's own chatter", *(json.dumps(e) for e in events)])


def test_our_steps_per_second_are_global_samples_per_second_over_the_global_batch():
    out = _lines({"event": "start", "global_batch_size": 64},
                 {"event": "step", "samples_per_second": 640.0}, {"event": "step", "samples_per_second": 1280.0},
                 {"event": "done", "samples_per_second": 1.0})
    assert gpu_check.trainer_rates(out) == [10.0, 20.0]


def test_the_bare_loops_steps_per_second_come_from_its_windows():
    out = _lines({"event": "window", "steps": 50, "seconds": 0.5}, {"event": "window", "steps": 50, "seconds": 0.25})
    assert gpu_check.bare_rates(out) == [100.0, 200.0]


@pytest.mark.parametrize(("rates", "warmup", "median", "spread"), [
    ([1.0, 10.0, 11.0, 9.0], 1, 10.0, 0.2),       # the slow first window (warm-up) is dropped
    ([5.0, 5.0], 0, 5.0, 0.0),
])
def test_a_run_is_the_median_of_its_timed_windows(rates, warmup, median, spread):
    assert gpu_check.summarize(rates, warmup) == pytest.approx(gpu_check.Rate(median, spread))


def test_a_run_without_a_timed_window_is_an_error_not_a_number():
    with pytest.raises(ValueError, match="no timed window"):
        gpu_check.summarize([1.0], 1)


@pytest.mark.parametrize(("runs", "rows"), [
    ({"ours": 98.0, "bare": 100.0, "ours-no-metrics": 99.0},
     [("ours/bare", "0.980"), ("ours-no-metrics/bare", "0.990"), ("metrics overhead", "+1.0%")]),
    ({"bare": 100.0, "ours-no-metrics": 101.0}, [("ours-no-metrics/bare", "1.010")]),  # no prometheus_client
    ({"ours": 90.0, "ours-no-metrics": 95.0}, [("metrics overhead", "+5.3%")]),          # the bare run failed
])
def test_ratios_are_printed_for_the_runs_that_finished(runs, rows):
    rates = {name: gpu_check.Rate(value, 0.0) for name, value in runs.items()}
    assert [(name, value) for name, value, _ in gpu_check.ratio_rows(rates)] == rows


def test_without_a_gpu_the_cuda_check_says_what_to_run_instead(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gpu_check.main([]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("gpu-check: no CUDA device") and "--device cpu" in line


@pytest.mark.parametrize(("argv", "width", "window_steps"), [([], 768, 50), (["--device", "cpu"], 16, 20),
                                                              (["--device", "cpu", "--width", "32"], 32, 20)])
def test_the_size_defaults_follow_the_device(argv, width, window_steps):
    args = gpu_check.parse_args(argv)
    assert (args.width, args.window_steps, args.precisions) == (width, window_steps, ["fp32", "bf16", "fp16"])


@pytest.mark.parametrize(("stderr", "line"), [
    ("Traceback\n  File x\ntorch.OutOfMemoryError: CUDA out of memory\nTraceback\n  File run.py\n"
     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 40 +
     "\n  error_file: <N/A>\n  traceback : see https://pytorch.org/docs/stable/elastic/errors.html\n" + "=" * 40,
     "torch.OutOfMemoryError: CUDA out of memory"),                   # the child's, not torchrun's report
    ("dpjob-trainer: error: --model-width must be a multiple of 8 and >= 8, got 12\nTraceback\n"
     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
     "dpjob-trainer: error: --model-width must be a multiple of 8 and >= 8, got 12"),
    ("usage: bare_ddp.py\nbare_ddp.py: error: the following arguments are required: --lr\n",
     "bare_ddp.py: error: the following arguments are required: --lr"),
    ("killed\n" + "-" * 20 + "\n", "killed"),
    ("", "(nothing on stderr)"),
])
def test_a_failed_run_is_reported_by_the_line_that_says_why(stderr, line):
    assert gpu_check.error_line(stderr) == line
