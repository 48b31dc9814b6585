"""`make gpu-check`: our trainer against a bare PyTorch DDP loop on one GPU, in one command.

For each precision (fp32, bf16, fp16) three runs under ``torchrun --nproc-per-node 1`` (NCCL on
``cuda:0``; with ``--device cpu``, gloo at a tiny size, the smoke run the tests make):

* ``ours``: ``python -m dpjob_trainer --task transformer`` with its metrics endpoint served;
* ``bare``: bench/bare_ddp.py, the loop a user writes from PyTorch's DDP and AMP tutorials, on the
  same model, data, batch and learning rate;
* ``ours-no-metrics``: our trainer with ``--metrics-port 0 --straggler-factor 0``.

Each run takes ``--warmup-windows`` + ``--windows`` windows of ``--window-steps`` steps; steps per
second is the median over the windows after warm-up (ours: from its ``step`` log lines, one per
window; bare: from its ``loss.item()`` every window). Printed: steps/s and the spread of the
windows per run, then ours / bare, ours-no-metrics / bare and the metrics overhead
(1 - ours / ours-no-metrics). Goals: ours >= 0.98 x bare, metrics <= 1%. With one process the
straggler check has nothing to compare (it needs two ranks), so only the metrics differ.

Needs only this repository and a python3 with torch (prometheus_client for the ``ours`` row;
without it that row is skipped with a line saying so). Exit 0 when every run finished, 1 when one
failed (its last error line is printed), 2 when torch or the device is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import socket
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "bf16", "fp16")
RUNS = ("ours", "bare", "ours-no-metrics")
# (model width, batch, window steps, windows, warm-up windows). Width 768 at batch 64 is 1.4 TFLOP
# per step: estimated (not yet measured) 4 ms in bf16 to 30 ms in fp32 (no TF32) on an H100, so the
# nine runs fit in a few minutes; width 16 at batch 4 is about 6 ms per step on one CPU core.
SIZES = {"cuda": (768, 64, 50, 7, 2), "cpu": (16, 4, 20, 5, 1)}
ERROR_LINE = re.compile(r"^([\w.]*(Error|Exception)|[\w.-]+: error): ")
# Small enough that no run diverges (a NaN would stop ours with exit 3); throughput does not depend on it.
LR = 0.01
# The launch contract of an outer launcher would confuse torchrun's children.
LAUNCH_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "TORCHELASTIC_RUN_ID", "DPJOB_METRICS_PORT", "DPJOB_STRAGGLER_FACTOR", "RANK_TABLE_FILE")


@dataclass(frozen=True)
class Rate:
    """Steps per second of one run: the median window and the windows' spread around it."""

    median: float
    spread: float  # (slowest to fastest window) / median


def summarize(rates: list[float], warmup: int) -> Rate:
    timed = rates[warmup:]
    if not timed:
        raise ValueError(f"no timed window: {len(rates)} window(s), {warmup} of them warm-up")
    median = statistics.median(timed)
    return Rate(median, (max(timed) - min(timed)) / median)


def trainer_rates(stdout: str) -> list[float]:
    """Steps/s of every logged interval of our trainer: its global samples/s over the global batch."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    (start,) = [e for e in events if e["event"] == "start"]
    return [e["samples_per_second"] / start["global_batch_size"] for e in events if e["event"] == "step"]


def bare_rates(stdout: str) -> list[float]:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [e["steps"] / e["seconds"] for e in events if e["event"] == "window"]


def error_line(stderr: str) -> str:
    """The line of a failed run's stderr that says why: the process's own error (a Python
    exception, ``prog: error: ...``), not torchrun's ChildFailedError report that follows it."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip().strip("=-")]
    named = [line for line in lines if ERROR_LINE.match(line) and "ChildFailedError" not in line]
    return ((named or lines or ["(nothing on stderr)"])[-1])[:300]


def ratio_rows(rates: dict[str, Rate]) -> list[tuple[str, str, str]]:
    """(name, value, goal) rows comparing the runs of one precision that finished."""
    rows = []
    if "ours" in rates and "bare" in rates:
        rows.append(("ours/bare", f"{rates['ours'].median / rates['bare'].median:.3f}", "goal >= 0.98"))
    if "ours-no-metrics" in rates and "bare" in rates:
        rows.append(("ours-no-metrics/bare", f"{rates['ours-no-metrics'].median / rates['bare'].median:.3f}", ""))
    if "ours" in rates and "ours-no-metrics" in rates:
        overhead = 1 - rates["ours"].median / rates["ours-no-metrics"].median
        rows.append(("metrics overhead", f"{100 * overhead:+.1f}%", "goal <= 1%"))
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _command(run: str, precision: str, args: argparse.Namespace, steps: int) -> list[str]:
    size = ["--model-width", str(args.width), "--batch-size", str(args.batch_size),
            "--dataset-size", str(32 * args.batch_size), "--steps", str(steps), "--lr", str(LR)]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "1"]
    if run == "bare":
        return [*launch, str(ROOT / "bench" / "bare_ddp.py"), "--device", args.device, "--precision", precision,
                "--window-steps", str(args.window_steps), *size]
    metrics = ["--metrics-port", str(_free_port())] if run == "ours" else ["--metrics-port", "0",
                                                                          "--straggler-factor", "0"]
    return [*launch, "-m", "dpjob_trainer", "--task", "transformer", "--precision", precision,
            "--log-every", str(args.window_steps), "--seed", "0", *metrics, *size]


def time_run(run: str, precision: str, args: argparse.Namespace) -> Rate | str:
    """One torchrun; its Rate, or the reason it has none in one line."""
    steps = (args.warmup_windows + args.windows) * args.window_steps
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_KEYS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "trainer-image"), env.get("PYTHONPATH")) if p)
    env["DPJOB_BACKEND"] = "nccl" if args.device == "cuda" else "gloo"
    if args.device == "cpu":  # OpenMP threads that outnumber free cores spin against each other
        env.setdefault("OMP_NUM_THREADS", "1")
    try:
        done = subprocess.run(_command(run, precision, args, steps), env=env, capture_output=True, text=True,
                              timeout=args.run_timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"did not finish in {args.run_timeout:g} s (--run-timeout)"
    if done.returncode != 0:
        return f"exit {done.returncode}: {error_line(done.stderr)}"
    rates = bare_rates(done.stdout) if run == "bare" else trainer_rates(done.stdout)
    return summarize(rates, args.warmup_windows)


def preflight(args: argparse.Namespace) -> tuple[str | None, str]:
    """(None or the reason nothing can run, a description of the machine)."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not importable by {sys.executable} ({exc}); install torch and rerun", ""
    if args.device == "cpu":
        return None, f"cpu (gloo), torch {torch.__version__}"
    if not torch.cuda.is_available():
        return (f"no CUDA device is visible to torch {torch.__version__} (torch.cuda.is_available() is False); "
                f"on a machine without a GPU run `python3 bench/gpu_check.py --device cpu`"), ""
    if not torch.distributed.is_nccl_available():
        return f"torch {torch.__version__} was built without NCCL; install a CUDA build of torch", ""
    name = torch.cuda.get_device_name(0)
    return None, f"{name} (nccl), torch {torch.__version__}, CUDA {torch.version.cuda}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated subset of fp32,bf16,fp16")
    p.add_argument("--width", type=int, help="transformer width (default: 768 on cuda, 16 on cpu)")
    p.add_argument("--batch-size", type=int, help="per-process batch (default: 64 on cuda, 4 on cpu)")
    p.add_argument("--window-steps", type=int, help="steps per timed window (default: 50 on cuda, 20 on cpu)")
    p.add_argument("--windows", type=int, help="timed windows per run (default: 7 on cuda, 5 on cpu)")
    p.add_argument("--warmup-windows", type=int, help="windows dropped first (default: 2 on cuda, 1 on cpu)")
    p.add_argument("--run-timeout", type=float, default=150.0, help="seconds one torchrun may take")
    args = p.parse_args(argv)
    for name, default in zip(("width", "batch_size", "window_steps", "windows", "warmup_windows"),
                             SIZES[args.device], strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    if unknown := set(args.precisions) - set(PRECISIONS):
        p.error(f"--precisions: unknown {', '.join(sorted(unknown))}; choose from {', '.join(PRECISIONS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem, machine = preflight(args)
    if problem:
        print(f"gpu-check: {problem}", flush=True)
        return 2
    runs = list(RUNS)
    if importlib.util.find_spec("prometheus_client") is None:
        runs.remove("ours")
        print("gpu-check: prometheus_client is not installed: the 'ours' run (metrics served) is skipped; "
              "pip install prometheus-client to time it", flush=True)
    print(f"gpu-check: {machine}; transformer width {args.width}, batch {args.batch_size}; {args.windows} windows of "
          f"{args.window_steps} steps after {args.warmup_windows} warm-up window(s)", flush=True)
    print(f"{'precision':<10} {'run':<22} {'steps/s':>10}  spread", flush=True)
    failed = False
    for precision in args.precisions:
        rates: dict[str, Rate] = {}
        for run in runs:
            result = time_run(run, precision, args)
            if isinstance(result, str):
                failed = True
                print(f"{precision:<10} {run:<22} failed: {result}", flush=True)
                continue
            rates[run] = result
            print(f"{precision:<10} {run:<22} {result.median:>10.2f}  {100 * result.spread:.1f}%", flush=True)
        for name, value, goal in ratio_rows(rates):
            print(f"{precision:<10} {name:<22} {value:>10}  {goal}".rstrip(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
