#!/usr/bin/env python3
"""A real Prometheus 3 for tests and ``make dev``, built from Go modules by devcluster/build.sh.

Two ways to point it at targets: static targets (:func:`render_config`, for unit tests that serve
metrics from the test process), or Kubernetes pod discovery through the API server
(:func:`render_cluster_config`), with the same relabelling as the chart's PodMonitor and
ServiceMonitor, for pods on the dev cluster's real nodes.

Stdlib only. The configurations live in ``prometheus_config``, the HTTP API's reads in
``prometheus_api`` and the dashboards' panel queries in ``dashboards``; this module starts and
stops the process and re-exports the rest, so callers need one name. The tests use it to prove
that the operator's and the trainer's metrics are scraped and that every panel query of the
chart's dashboards returns data:

    proc = start_prometheus(port=19090, operator_targets=["127.0.0.1:8080"],
                            trainer_targets=["127.0.0.1:9090", "127.0.0.1:9091"],
                            job_name="demo", namespace="t-ns")
    wait_ready(url)
    for dashboard, title, expr in dashboard_queries(): ...
        query(url, substitute(expr, {"namespace": "t-ns", "job": "demo"}))
    stop(proc)

Trainer targets get the labels the chart's PodMonitor gives them in a cluster (``namespace``,
``dpjob_job``, ``dpjob_rank``, ``pod``), so the dashboards' selectors match exactly as they
would behind the Prometheus Operator. Operator targets are scraped under the job name
``dpjob-operator`` (the dashboards' ``$operator`` variable).

CLI: ``python3 devcluster/prometheus.py --port 19090 --operator 127.0.0.1:8080 --trainer
127.0.0.1:9090`` runs in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script, devcluster/ is on the path, not the repository

from devcluster.dashboards import BUILTINS, DASHBOARD_DIR, dashboard_queries, substitute  # noqa: E402
from devcluster.prometheus_api import config, query, query_range, targets, wait_targets_up  # noqa: E402
from devcluster.prometheus_config import (  # noqa: E402
    OPERATOR_JOB,
    OPERATOR_RELABEL,
    TRAINER_JOB,
    TRAINER_RELABEL,
    render_cluster_config,
    render_config,
)

# What the tests, devcluster/stack.py and the CLI below read from here.
__all__ = ["BUILTINS", "CLUSTER_FLAGS", "DASHBOARD_DIR", "OPERATOR_JOB", "OPERATOR_RELABEL", "STANDALONE_FLAGS",
           "TRAINER_JOB", "TRAINER_RELABEL", "config", "dashboard_queries", "main", "prometheus_binary", "query",
           "query_range", "render_cluster_config", "render_config", "start_prometheus", "stop", "substitute",
           "targets", "wait_ready", "wait_targets_up"]


def prometheus_binary() -> str:
    """``$DPJOB_PROMETHEUS``, else the Prometheus 3 that devcluster/build.sh builds (or reuses)."""
    if os.environ.get("DPJOB_PROMETHEUS"):
        return os.environ["DPJOB_PROMETHEUS"]
    out = subprocess.run(["bash", str(REPO / "devcluster" / "build.sh")], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError("devcluster/build.sh failed: it prints the failing step and its log above")
    return str(Path(out.stdout.strip().splitlines()[-1]) / "prometheus")


# Flags after the config, storage and listen address: a standalone Prometheus (tests, the CLI) keeps
# a day and can be reloaded; the dev cluster's keeps Prometheus' defaults.
STANDALONE_FLAGS = ("--storage.tsdb.retention.time=1d", "--web.enable-lifecycle", "--log.level=warn")
CLUSTER_FLAGS = ("--log.level=warn",)


def start_prometheus(port: int = 19090, operator_targets: Sequence[str] = ("127.0.0.1:8080",),
                     trainer_targets: Sequence[str] = (), *, job_name: str = "test-job",
                     namespace: str = "default", scrape_interval: str = "1s", workdir: str | Path | None = None,
                     trainer_labels: Sequence[Mapping[str, str]] | None = None,
                     binary: str | None = None, config: str | None = None, log: Path | None = None,
                     flags: Sequence[str] = STANDALONE_FLAGS) -> subprocess.Popen:
    """Start Prometheus on 127.0.0.1:<port>, in its own session; returns the process (``proc.pid``,
    ``proc.url``, ``proc.workdir``, ``proc.log``). The one way this repository starts a Prometheus.

    ``config``: the configuration to load (:func:`render_cluster_config`'s); by default
    :func:`render_config` of the static targets and labels given. Storage and config live in
    ``workdir`` (a fresh temp dir by default, removed by ``stop``); output is appended to ``log``
    (``workdir/prometheus.log`` by default).
    """
    binary = binary or prometheus_binary()
    own_dir = workdir is None
    wd = Path(workdir or tempfile.mkdtemp(prefix="dpjob-prom-"))
    wd.mkdir(parents=True, exist_ok=True)
    cfg = wd / "prometheus.yml"
    cfg.write_text(config if config is not None else render_config(
        operator_targets, trainer_targets, job_name=job_name, namespace=namespace,
        scrape_interval=scrape_interval, trainer_labels=trainer_labels))
    log = log or wd / "prometheus.log"
    with open(log, "ab") as out:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={wd / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", *flags],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True)
    proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    proc.workdir = wd  # type: ignore[attr-defined]
    proc.own_workdir = own_dir  # type: ignore[attr-defined]
    proc.log = log  # type: ignore[attr-defined]
    return proc


def wait_ready(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            log = Path(getattr(proc, "log", Path(getattr(proc, "workdir", ".")) / "prometheus.log"))
            raise RuntimeError(f"prometheus exited with {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:] if log.exists() else ''}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = e
        time.sleep(0.25)
    raise TimeoutError(f"prometheus at {url} not ready after {timeout}s: {last}")


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Stop the Prometheus started by ``start_prometheus`` (this process only) and clean up."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    if getattr(proc, "own_workdir", False):
        shutil.rmtree(proc.workdir, ignore_errors=True)



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run Prometheus scraping the operator and trainers (foreground).")
    parser.add_argument("--port", type=int, default=19090)
    parser.add_argument("--operator", action="append", default=[], help="host:port of the operator /metrics")
    parser.add_argument("--trainer", action="append", default=[], help="host:port of a trainer /metrics")
    parser.add_argument("--job-name", default="test-job")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--print-config", action="store_true")
    args = parser.parse_args(argv)
    operator_targets = args.operator or ["127.0.0.1:8080"]
    if args.print_config:
        print(render_config(operator_targets, args.trainer, job_name=args.job_name, namespace=args.namespace), end="")
        return 0
    proc = start_prometheus(args.port, operator_targets, args.trainer, job_name=args.job_name,
                            namespace=args.namespace)
    try:
        wait_ready(proc.url, proc=proc)  # type: ignore[attr-defined]
        print(f"prometheus pid {proc.pid} at {proc.url} (workdir {proc.workdir})", flush=True)  # type: ignore[attr-defined]
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
