"""Trainer throughput: metrics on vs off (target < 2% overhead), and 2 gloo ranks vs 1 process.

Not run by the tests. Usage (from the repository root, in the project venv):

    python bench/bench_trainer.py [--seconds 4] [--block 10] [--steps 1000] [--quick] [--skip-ranks]

Part 1, metrics overhead, runs the real training loop (``Trainer.run``, world size 1) in this
process with the metrics endpoint really served, and switches metrics on and off *inside the
same run* in blocks of ``--block`` steps, in pairs (one block on, one off, order by coin). The
per-step period (from one step's ``observe_step`` call to the next, so it contains the previous
step's metrics work) is recorded for every step; each pair gives median(period, on block) /
median(period, off block), and the overhead is the median over pairs minus 1, in wall time and
in this thread's CPU time, next to an A/A run (metrics off on both sides) that shows the
machine's noise floor. Interleaving at a granularity of milliseconds makes
the comparison immune to the slow load swings of a shared machine, which swamp a 1% effect when
whole runs are compared. A third column predicts the overhead from the measured cost of one
``observe_step`` call divided by the step time. On a CUDA machine the loop runs on the GPU (the
trainer's automatic device choice), otherwise on CPU with ``--threads`` (default 1) torch
threads: OpenMP threads that outnumber free cores spin against each other.

Part 2 starts the real CLI as subprocesses: one process (1 thread, and all cores) vs two gloo
ranks (1 thread each), same global batch, and reads global samples/s of the training loop from
rank 0's ``done`` event. Report only: on a small CPU box two ranks mostly measure gloo overhead.

Prints a table and writes JSON to bench/results/ (gitignored).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer-image"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from dpjob_trainer.config import TrainConfig  # noqa: E402
from dpjob_trainer.env import parse_env  # noqa: E402
from dpjob_trainer.metrics import NullMetrics, TrainerMetrics  # noqa: E402
from dpjob_trainer.stop_flag import StopFlag  # noqa: E402
from dpjob_trainer.train import Trainer  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

WORKLOADS = [  # (name, task, per-rank batch)
    ("mlp-b32", "mlp", 32),
    ("mlp-b256", "mlp", 256),
    ("cnn-b32", "cnn", 32),
]


class ToggledMetrics(NullMetrics):
    """Forwards to ``live`` in half of the blocks of steps and times every step period.

    Blocks come in pairs, one with metrics and one without, in an order chosen by a seeded coin;
    the overhead is estimated *within* each pair (adjacent in time, so slow load swings cancel)
    and the median over pairs is reported. The coin keeps periodic events (epoch reshuffle, GC)
    from aliasing onto one side.
    """

    def __init__(self, live: NullMetrics, block: int, seed: int = 0) -> None:
        self.live, self.block = live, block
        self.coin = random.Random(seed)
        self.pair_on_first = False
        self.calls = 0
        self.last: tuple[float, float] | None = None
        self.last_block = -1
        self.periods: dict[int, list[tuple[float, float]]] = {}  # block index -> (wall, cpu) periods

    def set_info(self, **labels: str) -> None:
        self.live.set_info(**labels)

    def observe_checkpoint(self, duration: float) -> None:
        self.live.observe_checkpoint(duration)

    def block_on(self, block: int) -> bool:
        return (block % 2 == 0) == self.pair_on_first if block >= 0 else False

    def observe_step(self, **kwargs: Any) -> None:
        now = (time.perf_counter(), time.thread_time())
        if self.last is not None and self.last_block >= 2:  # the first pair is warm-up
            # This period began right after the previous call, so it contains that call's metrics work.
            self.periods.setdefault(self.last_block, []).append((now[0] - self.last[0], now[1] - self.last[1]))
        block = self.calls // self.block
        if self.calls % (2 * self.block) == 0:
            self.pair_on_first = self.coin.random() < 0.5
        if self.block_on(block):
            self.live.observe_step(**kwargs)
        self.last, self.last_block = now, block
        self.calls += 1

    def overhead(self) -> tuple[float, float, float, float]:
        """(median ms/step off, on, wall overhead %, CPU overhead %) from within-pair ratios."""
        wall, cpu, on_ms, off_ms = [], [], [], []
        for pair in sorted({b // 2 for b in self.periods}):
            blocks = [2 * pair, 2 * pair + 1]
            if not all(len(self.periods.get(b, [])) >= self.block // 2 for b in blocks):
                continue
            on_b, off_b = blocks if self.block_on(blocks[0]) else blocks[::-1]
            on = [statistics.median(p[i] for p in self.periods[on_b]) for i in (0, 1)]
            off = [statistics.median(p[i] for p in self.periods[off_b]) for i in (0, 1)]
            wall.append(on[0] / off[0])
            cpu.append(on[1] / off[1] if off[1] > 0 else 1.0)
            on_ms.append(on[0] * 1e3)
            off_ms.append(off[0] * 1e3)
        return (statistics.median(off_ms), statistics.median(on_ms),
                (statistics.median(wall) - 1) * 100, (statistics.median(cpu) - 1) * 100)


def run_in_process(task: str, batch: int, steps: int, metrics: NullMetrics) -> dict:
    """One training run in this process; returns the trainer's ``done`` event."""
    env = parse_env({})  # world 1; device chosen automatically (CUDA if present)
    cfg = TrainConfig(task=task, steps=steps, batch_size=batch, log_every=0, dataset_size=max(4096, batch * 16))
    out = io.StringIO()
    code = Trainer(cfg, env, metrics, StopFlag(), out=out).run()
    assert code == 0, out.getvalue()[-2000:]
    return [json.loads(line) for line in out.getvalue().splitlines() if '"event": "done"' in line][-1]


def observe_step_cost_us(calls: int = 20000) -> float:
    m = TrainerMetrics()
    started = time.perf_counter()
    for _ in range(calls):
        m.observe_step(duration=0.01, samples=32, data_wait=0.001, comm_exposed=0.001, loss=1.0, learning_rate=0.1,
                       grad_norm=1.0, epoch=1, timestamp=time.time(), step=1, global_samples=64)
    return (time.perf_counter() - started) / calls * 1e6


def _compare(task: str, batch: int, steps: int, block: int, live: NullMetrics) -> tuple[float, float, float, float]:
    """(wall ms/step off, wall ms/step on, wall overhead %, CPU overhead %) from one toggled run."""
    toggled = ToggledMetrics(live, block)
    run_in_process(task, batch, steps, toggled)
    return toggled.overhead()


def metrics_overhead(seconds: float, block: int, workloads: list[tuple[str, str, int]], cost_us: float) -> list[dict]:
    rows = []
    for name, task, batch in workloads:
        rate = run_in_process(task, batch, 50, NullMetrics())["samples_per_second"]  # warm-up and calibration
        steps = max(int(seconds * rate / batch), 40 * block)
        # A/A first: both sides without metrics. Its "overhead" is this machine's noise floor.
        _, _, aa_wall, aa_cpu = _compare(task, batch, steps, block, NullMetrics())
        live = TrainerMetrics()
        live.serve(free_port(), "127.0.0.1")
        off_ms, on_ms, wall, cpu = _compare(task, batch, steps, block, live)
        live.close()
        rows.append({
            "workload": name, "device": "cuda" if torch.cuda.is_available() else "cpu", "steps": steps, "block": block,
            "step_ms_off": off_ms, "step_ms_on": on_ms, "samples_per_s_off": batch / off_ms * 1e3,
            "samples_per_s_on": batch / on_ms * 1e3, "overhead_pct_wall": wall, "overhead_pct_cpu": cpu,
            "noise_floor_pct_wall": aa_wall, "noise_floor_pct_cpu": aa_cpu,
            "predicted_overhead_pct": cost_us * 1e-3 / off_ms * 100,
        })  # fmt: skip
    return rows


def _cli_throughput(world: int, batch: int, steps: int, threads: int, task: str) -> float:
    """Global samples/s of the training loop, from rank 0's ``done`` event."""
    port = free_port()
    base_env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")}
    base_env["PYTHONPATH"] = str(ROOT / "trainer-image")
    base_env["DPJOB_BACKEND"] = "gloo"  # CPU for both sides, also on a GPU machine
    args = [sys.executable, "-m", "dpjob_trainer", "--task", task, "--steps", str(steps), "--batch-size", str(batch),
            "--log-every", "0", "--metrics-port", "0", "--num-threads", str(threads), "--dataset-size", "8192"]
    procs = []
    for rank in range(world):
        env = dict(base_env)
        if world > 1:
            env.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"trainer failed: {[p.returncode for p in procs]}")
    done = [json.loads(line) for line in outputs[0].splitlines() if '"event": "done"' in line][-1]
    return done["samples_per_second"]


def ranks_vs_single(steps: int, global_batch: int, task: str) -> dict:
    cores = os.cpu_count() or 1
    single = _cli_throughput(1, global_batch, steps, 1, task)
    single_all = _cli_throughput(1, global_batch, steps, cores, task)
    two = _cli_throughput(2, global_batch // 2, steps, 1, task)
    return {"task": task, "global_batch": global_batch, "steps": steps, "cores": cores,
            "single_1thread_samples_per_s": single, "single_all_cores_samples_per_s": single_all,
            "two_gloo_ranks_samples_per_s": two, "speedup_vs_1thread": two / single}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="target length of each part-1 run")
    parser.add_argument("--block", type=int, default=10, help="steps per metrics on/off block in part 1")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for part 1 on CPU (0: torch default)")
    parser.add_argument("--steps", type=int, default=1000, help="steps of each part-2 run")
    parser.add_argument("--quick", action="store_true", help="one workload, shorter runs")
    parser.add_argument("--skip-ranks", action="store_true", help="skip the 2-rank vs 1-process part")
    args = parser.parse_args()
    workloads = WORKLOADS[:1] if args.quick else WORKLOADS
    seconds = args.seconds / 4 if args.quick else args.seconds
    if args.threads and not torch.cuda.is_available():
        torch.set_num_threads(args.threads)

    cost = observe_step_cost_us()
    overhead = metrics_overhead(seconds, args.block, workloads, cost)
    print(f"\nmetrics on vs off, same run, paired on/off blocks of {args.block} steps "
          f"(world 1, {overhead[0]['device']}, {torch.get_num_threads()} thread(s)); "
          f"observe_step costs {cost:.1f} us per step")
    print(f"{'workload':<10} {'steps':>6} {'ms/step off':>11} {'ms/step on':>11} {'samples/s off':>14} "
          f"{'wall ovh':>9} {'CPU ovh':>9} {'A/A wall':>9} {'A/A CPU':>9} {'predicted':>9}")
    for row in overhead:
        print(f"{row['workload']:<10} {row['steps']:>6} {row['step_ms_off']:>11.3f} {row['step_ms_on']:>11.3f} "
              f"{row['samples_per_s_off']:>14.0f} {row['overhead_pct_wall']:>8.2f}% {row['overhead_pct_cpu']:>8.2f}% "
              f"{row['noise_floor_pct_wall']:>8.2f}% {row['noise_floor_pct_cpu']:>8.2f}% "
              f"{row['predicted_overhead_pct']:>8.2f}%")
    print("(ovh = median over adjacent block pairs of step period with metrics / without - 1, wall clock and thread "
          "CPU time; A/A = the same with metrics off on both sides, i.e. the noise floor; "
          "predicted = observe_step cost / step time)")
    ranks = None
    if not args.skip_ranks:
        ranks = ranks_vs_single(steps=args.steps, global_batch=256, task="mlp")
        print(f"\n2 gloo ranks vs 1 process (mlp, global batch {ranks['global_batch']}, {ranks['steps']} steps, "
              f"{ranks['cores']} cores; report only)")
        print(f"{'1 process, 1 thread':<28} {ranks['single_1thread_samples_per_s']:>10.0f} samples/s")
        all_cores = f"1 process, {ranks['cores']} threads"
        print(f"{all_cores:<28} {ranks['single_all_cores_samples_per_s']:>10.0f} samples/s")
        print(f"{'2 gloo ranks, 1 thread each':<28} {ranks['two_gloo_ranks_samples_per_s']:>10.0f} samples/s  "
              f"(x{ranks['speedup_vs_1thread']:.2f} vs 1 thread)")

    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"time": time.time(), "torch": torch.__version__, "cuda": torch.cuda.is_available(),
              "observe_step_us": cost, "metrics_overhead": overhead, "ranks_vs_single": ranks}
    path = out_dir / f"bench_trainer-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
