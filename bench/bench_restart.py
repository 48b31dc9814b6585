"""Restart in place against recreate: how long a gang takes to step again after a rank is killed.

Real node (the default): for each ``--ranks`` and each of ``--reps`` repetitions, one job of the
trainer image per strategy, interleaved (InPlace, Recreate, InPlace, ...), on the dev cluster's
real node with ``--log-every 1`` and a checkpoint every 10 steps. Three ways to restart: ``Warm``
(an InPlace job with metrics on: the trainer's supervisor replaces the training process inside the
container, dpjob_trainer/warm.py), ``InPlace`` (metrics off, so no supervisor: the kubelet restarts
every container of the pods) and ``Recreate`` (new pods). Once the job is Running, has a
checkpoint and a few steps more, rank 1's trainer is SIGKILLed on this host (Warm: its training
process; otherwise every trainer process of the container, which ends it); the clock
runs from the kill to the moment the LAST rank logged its first step of the next generation (the
trainer's own JSON log line and its wall-clock ``time``: bench/restart_report.py). The job is
deleted, and its pods gone, before the next one starts.

``--kwok N``: N ranks on kwok nodes, where no container runs: the benchmark plays the kubelet's
part of an in-place restart (bench/restart_kwok.py) and times until the job is Running again.
Only the operator's side is measured there: its requests and its time to see the gang run again.

Both modes run the operator of this checkout as a process (the Helm-installed one is scaled to
zero meanwhile and given back after), without leader election, so that its Lease renewals are not
counted, and at the shipped resync. Its API requests per restart are its own
``rest_client_requests_total`` from just before the kill (or the first status write) to the job
Running again, by method and status code.

Run (needs ``make cluster-up``, as root: the kill finds the trainer's process in /proc):

    python bench/bench_restart.py --reps 5 --ranks 2 4     # real node: bench/results/restart.{json,md}
    python bench/bench_restart.py --kwok 512 --reps 3      # kwok: bench/results/restart-kwok.{json,md}
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from kubernetes import client, config  # noqa: E402

from bench.bench_operator import BENCH_LABEL, delete_job, ensure_nodes  # noqa: E402
from bench.measure import OperatorSample, RunMeter, delete_namespace  # noqa: E402
from bench.restart_kwok import run_kwok  # noqa: E402
from bench.restart_report import STRATEGIES, markdown, recovery, resumed_at, running_again, summarize  # noqa: E402
from tests.support import cluster as dpj  # noqa: E402
from tests.support.operator import OperatorProcess  # noqa: E402
from tests.support.paths import DEVCLUSTER, KUBECONFIG  # noqa: E402
from tests.support.realnode_jobs import container_pids, log_lines, trainer_job, training_pids, workdir  # noqa: E402
from tests.support.waits import TimedOut, wait_until  # noqa: E402

KILLED_RANK = 1
CHECKPOINT_EVERY = 10
STEPS = 100_000  # more than any run lasts: each job is deleted once it has resumed
GENERATION = 1  # one kill per job: the gang that resumes runs generation 1 (pod generation + warm restarts)
WARM = "Warm"

Run = Callable[[str, int, int], dict[str, Any]]


def trainer_args(base: Path, strategy: str) -> list[str]:
    """Warm: metrics on (the operator reads them), so the trainer supervises; otherwise off, so the
    kubelet's restart (InPlace) or new pods (Recreate) are what is timed."""
    metrics = [] if strategy == WARM else ["--metrics-port", "0"]
    return ["--task", "mlp", "--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY),
            "--checkpoint-dir", f"{base}/ckpt", *metrics, "--log-every", "1"]


def job_strategy(strategy: str) -> str:
    """The job's runPolicy.restartStrategy: a warm restart is what an InPlace job's trainer does."""
    return "InPlace" if strategy == WARM else strategy


def _last_step(ns: str, pod: str) -> int:
    return max((int(e["step"]) for e in log_lines(ns, pod) if e.get("event") == "step"), default=0)


def _wait_training(api: client.ApiClient, ns: str, name: str, strategy: str, timeout: float) -> None:
    """Running with ``strategy``, a checkpoint on disk, and a few steps after it on the rank to kill."""
    st = dpj.wait_phase(api, ns, name, "Running", timeout=timeout)
    if st.get("restartStrategy") != strategy:
        raise RuntimeError(f"{name} runs with restartStrategy {st.get('restartStrategy')}, not {strategy}: "
                           "does the cluster serve RestartAllContainers?")
    ckpt = workdir(ns, name) / "ckpt"
    wait_until(lambda: any(ckpt.glob("*")), timeout, interval=0.5, what=f"{name}: a checkpoint")
    wait_until(lambda: _last_step(ns, f"{name}-rank-{KILLED_RANK}") >= CHECKPOINT_EVERY + 3, timeout,
               interval=0.5, what=f"{name}: a few steps after the checkpoint")


def _kill_and_time(api: client.ApiClient, meter: RunMeter, ns: str, name: str, ranks: int, strategy: str,
                   timeout: float) -> dict[str, Any]:
    """SIGKILL rank 1's trainer (Warm: its training process, the supervisor stays); seconds until every
    rank stepped again, and the operator's requests meanwhile."""
    find = training_pids if strategy == WARM else container_pids
    pids = wait_until(lambda: find(ns, name, KILLED_RANK), 30, what=f"{name}: rank 1's trainer process")
    end = meter.begin("dpjob")
    killed_at = time.time()
    for pid in pids:  # with pid 1 of the container, the container dies
        os.kill(pid, signal.SIGKILL)
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(killed_at))  # whole seconds: at or before the kill

    def resumed() -> dict[int, float | None] | None:
        got = {rank: resumed_at(log_lines(ns, f"{name}-rank-{rank}", since), GENERATION) for rank in range(ranks)}
        return got if recovery(got, killed_at) is not None else None

    got = wait_until(resumed, timeout, interval=0.5, what=f"{name}: every rank stepping again")
    dpj.wait_status(api, ns, name, running_again, what="Running again after one restart", timeout=timeout)
    return {"recover_s": recovery(got, killed_at),
            "rank_resumed_s": {str(rank): round(t - killed_at, 3) for rank, t in got.items() if t is not None},
            **end()}


def run_real(strategy: str, ranks: int, rep: int, core: client.CoreV1Api, custom: client.CustomObjectsApi,
             meter: RunMeter, ns: str, timeout: float) -> dict[str, Any]:
    """One job of ``ranks`` trainer ranks on the real node with ``strategy``, killed once."""
    name = f"r{ranks}-{strategy.lower()}-{rep}"
    row: dict[str, Any] = {"mode": "real", "ranks": ranks, "strategy": strategy, "rep": rep}
    job = trainer_job(name, trainer_args(workdir(ns, name), strategy), replicas=ranks, backoff_limit=3)
    job["spec"]["runPolicy"]["restartStrategy"] = job_strategy(strategy)
    dpj.create(core.api_client, ns, job)
    try:
        _wait_training(core.api_client, ns, name, job_strategy(strategy), timeout)
        row.update(_kill_and_time(core.api_client, meter, ns, name, ranks, strategy, timeout))
    finally:
        delete_job(custom, core, ns, name)
        shutil.rmtree(workdir(ns, name), ignore_errors=True)
    return row


def runs(sizes: list[int], reps: int, mode: str, run: Run,
         strategies: tuple[str, ...] = STRATEGIES) -> list[dict[str, Any]]:
    """Every run, strategies interleaved, printed as it finishes; one that timed out is kept as missing."""
    rows: list[dict[str, Any]] = []
    for ranks in sizes:
        for rep in range(reps):
            for strategy in strategies:
                try:
                    row = run(strategy, ranks, rep)
                except TimedOut as e:
                    row = {"mode": mode, "ranks": ranks, "strategy": strategy, "rep": rep, "error": str(e)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


@contextlib.contextmanager
def operator_process(log_name: str) -> Iterator[OperatorSample]:
    """This checkout's operator as the only one, as shipped (resync), leader election off."""
    from devcluster import stack
    from dpjob_operator.config import OperatorConfig

    chart_replicas = stack.operator_replicas()
    stack.scale_operator(0)
    (DEVCLUSTER / "logs").mkdir(parents=True, exist_ok=True)
    op = OperatorProcess(KUBECONFIG, DEVCLUSTER / "logs" / log_name,
                         {"DPJOB_RESYNC_SECONDS": str(OperatorConfig().resync_seconds)}, leader_election=False)
    try:
        op.start()
        assert op.proc is not None
        yield OperatorSample(op.proc.pid, f"http://127.0.0.1:{op.metrics_port}/metrics")
    finally:
        op.stop()
        stack.give_back_operator(chart_replicas)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="runs per strategy and size")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="real node: ranks per job")
    parser.add_argument("--kwok", type=int, metavar="N", help="N ranks on kwok nodes instead (the operator's side)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per wait before a run counts as missing")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    return parser.parse_args(argv)


def _caption(args: argparse.Namespace) -> tuple[str, list[str]]:
    machine = (f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
               f"{platform.system()} {platform.release()}")
    head = f"Run {time.strftime('%Y-%m-%d')} on {machine}; {args.reps} runs per strategy, interleaved; median (min-max)"
    notes = ["operator API requests: its own rest_client_requests_total (every method, watches included) from just "
             "before the failure to the job Running again, leader election off (no Lease renewals), resync as "
             "shipped; writes are its POST, PUT, PATCH and DELETE."]
    if args.kwok:
        return (f"{head} seconds from the first status write to the job Running again, {args.kwok} ranks on kwok "
                "nodes (no containers: InPlace writes every pod's status as a kubelet does after an in-place "
                "restart; Recreate has kwok fail rank 1 with exit 137)."), notes
    return (f"{head} seconds from the SIGKILL of rank 1's trainer to the last rank's first step of the next "
            "generation (its own log line), on the real node, CPU ranks of the trainer image (task mlp)."), notes


def _write(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    summary = summarize(rows, "running_s" if args.kwok else "recover_s")
    caption, notes = _caption(args)
    table = markdown(summary, caption, notes)
    stem = "restart-kwok" if args.kwok else "restart"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps({"caption": caption, "summary": summary, "runs": rows}, indent=2))
    (out / f"{stem}.md").write_text(table)
    print(table)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop our operator
    args = _arguments(argv)
    from devcluster import cluster, stack

    if not args.kwok and not cluster.NODES:
        print("bench_restart: the cluster has no real node (DPJOB_REAL_NODES=0); use --kwok N, or unset it and "
              "run `make cluster-down cluster-up`", file=sys.stderr)
        return 2
    config.load_kube_config(str(KUBECONFIG))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    stack.apply_crds()
    if args.kwok:
        ensure_nodes(core, "cpu", max(2, -(-args.kwok // 900)), {})
    ns = f"bench-restart-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        with operator_process("operator-bench-restart.log") as sample:
            meter = RunMeter(core, {"dpjob": sample}, {})
            run = functools.partial(run_kwok if args.kwok else run_real, core=core, custom=custom, meter=meter,
                                    ns=ns, timeout=args.timeout)
            # kwok runs no trainer, so no warm restart: only the operator's side of the other two
            rows = runs([args.kwok] if args.kwok else args.ranks, args.reps, "kwok" if args.kwok else "real", run,
                        tuple(s for s in STRATEGIES if s != WARM) if args.kwok else STRATEGIES)
    finally:
        delete_namespace(core, ns)
        if args.kwok:
            dpj.kubectl("delete", "nodes", "-l", f"{BENCH_LABEL}=true", "--wait=false")  # ours: leave the pools
    _write(args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
