#!/usr/bin/env python3
"""A real Prometheus 3 for tests and ``make dev``, built from Go modules by devcluster/build.sh.

Two ways to point it at targets: static targets (:func:`render_config`, for unit tests that serve
metrics from the test process), or Kubernetes pod discovery through the API server
(:func:`render_cluster_config`), with the same relabelling as the chart's PodMonitor and
ServiceMonitor, for pods on the dev cluster's real nodes.

Stdlib only. The tests use it to prove that the operator's and the trainer's metrics are
scraped and that every panel query of the chart's dashboards returns data:

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
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DASHBOARD_DIR = REPO / "helm" / "dpjob-operator" / "dashboards"
OPERATOR_JOB = "dpjob-operator"
TRAINER_JOB = "dpjob-trainers"

# What Grafana would substitute for its built-in interval variables at a 1 s scrape interval.
BUILTINS = {"__rate_interval": "30s", "__interval": "5s", "__range": "5m", "__interval_ms": "5000",
            "__range_s": "300"}


def prometheus_binary() -> str:
    """``$DPJOB_PROMETHEUS``, else the Prometheus 3 that devcluster/build.sh builds (or reuses)."""
    if os.environ.get("DPJOB_PROMETHEUS"):
        return os.environ["DPJOB_PROMETHEUS"]
    out = subprocess.run(["bash", str(REPO / "devcluster" / "build.sh")], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError("devcluster/build.sh failed: it prints the failing step and its log above")
    return str(Path(out.stdout.strip().splitlines()[-1]) / "prometheus")


# ---- configuration -------------------------------------------------------------------------

def _yaml_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def render_config(operator_targets: Sequence[str] = ("127.0.0.1:8080",),
                  trainer_targets: Sequence[str] = (), *, job_name: str = "test-job",
                  namespace: str = "default", scrape_interval: str = "1s",
                  trainer_labels: Sequence[Mapping[str, str]] | None = None) -> str:
    """Prometheus YAML (written as JSON-compatible YAML, so no PyYAML is needed).

    Each trainer target is its own static_config so it can carry its rank label; pass
    ``trainer_labels`` (one mapping per target) to override or extend the defaults.
    """
    trainer_configs = []
    for i, target in enumerate(trainer_targets):
        labels = {"namespace": namespace, "dpjob_job": job_name, "dpjob_rank": str(i),
                  "pod": f"{job_name}-rank-{i}"}
        if trainer_labels is not None and i < len(trainer_labels):
            labels.update(trainer_labels[i])
        trainer_configs.append({"targets": [target], "labels": labels})
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": OPERATOR_JOB, "metrics_path": "/metrics",
             "static_configs": [{"targets": list(operator_targets)}] if operator_targets else []},
            {"job_name": TRAINER_JOB, "metrics_path": "/metrics", "static_configs": trainer_configs},
        ],
    }
    return json.dumps(config, indent=2) + "\n"


# What the chart's PodMonitor does for trainer pods, as plain kubernetes_sd relabelling: keep pods
# the operator made, scrape the container ports named ``metrics``, and label them as the
# dashboards expect (``namespace``, ``pod``, ``dpjob_job``, ``dpjob_rank``, ``dpjob_restart``).
TRAINER_RELABEL = [
    {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_managed_by"], "regex": "dpjob-operator",
     "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_labelpresent_dpjob_io_job_name"], "regex": "true", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    {"source_labels": ["__meta_kubernetes_pod_label_dpjob_io_job_name"], "target_label": "dpjob_job"},
    {"source_labels": ["__meta_kubernetes_pod_label_dpjob_io_rank"], "target_label": "dpjob_rank"},
    {"source_labels": ["__meta_kubernetes_pod_label_dpjob_io_restart"], "target_label": "dpjob_restart"},
]
# The operator pod the chart installs (its ServiceMonitor scrapes the port named http-metrics).
OPERATOR_RELABEL = [
    {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "regex": "dpjob-operator",
     "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "http-metrics", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
]


def render_cluster_config(kubeconfig: str | Path, operator_targets: Sequence[str] = (),
                          scrape_interval: str = "1s", token_file: str | Path | None = None) -> str:
    """Prometheus config that discovers pods through the API server (``kubernetes_sd_configs``).

    Trainer pods and the operator pod are found by discovery; ``operator_targets`` adds an
    operator that runs as a process (the integration tests' operator) under the same job name.
    ``token_file`` holds the bearer token the chart's operator pod asks for (metrics.auth).
    """
    sd = [{"role": "pod", "kubeconfig_file": str(kubeconfig)}]
    operator_job: dict = {"job_name": OPERATOR_JOB, "kubernetes_sd_configs": sd, "relabel_configs": OPERATOR_RELABEL}
    if token_file:
        operator_job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
    if operator_targets:
        operator_job["static_configs"] = [{"targets": list(operator_targets)}]
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [operator_job,
                           {"job_name": TRAINER_JOB, "kubernetes_sd_configs": sd, "relabel_configs": TRAINER_RELABEL}],
    }
    return json.dumps(config, indent=2) + "\n"


# ---- process ---------------------------------------------------------------------------------

def start_prometheus(port: int = 19090, operator_targets: Sequence[str] = ("127.0.0.1:8080",),
                     trainer_targets: Sequence[str] = (), *, job_name: str = "test-job",
                     namespace: str = "default", scrape_interval: str = "1s", workdir: str | Path | None = None,
                     trainer_labels: Sequence[Mapping[str, str]] | None = None,
                     binary: str | None = None) -> subprocess.Popen:
    """Start Prometheus on 127.0.0.1:<port>; returns the process (``proc.pid``, ``proc.workdir``).

    Storage, config and log live in ``workdir`` (a fresh temp dir by default, removed by ``stop``).
    """
    binary = binary or prometheus_binary()
    own_dir = workdir is None
    wd = Path(workdir or tempfile.mkdtemp(prefix="dpjob-prom-"))
    wd.mkdir(parents=True, exist_ok=True)
    cfg = wd / "prometheus.yml"
    cfg.write_text(render_config(operator_targets, trainer_targets, job_name=job_name, namespace=namespace,
                                 scrape_interval=scrape_interval, trainer_labels=trainer_labels))
    with open(wd / "prometheus.log", "wb") as log:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={wd / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
             "--web.enable-lifecycle", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    proc.workdir = wd  # type: ignore[attr-defined]
    proc.own_workdir = own_dir  # type: ignore[attr-defined]
    return proc


def wait_ready(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            log = Path(getattr(proc, "workdir", ".")) / "prometheus.log"
            raise RuntimeError(f"prometheus exited with {proc.returncode}: "
                               f"{log.read_text()[-2000:] if log.exists() else ''}")
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


# ---- HTTP API ----------------------------------------------------------------------------------

def _get(url: str, path: str, params: Mapping[str, str], timeout: float) -> dict:
    full = f"{url}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(full, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as e:  # 400/422: bad PromQL; the body says why
        body = json.loads(e.read() or b"{}")
        raise ValueError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}") from None
    if body.get("status") != "success":
        raise ValueError(f"{path} {params}: {body}")
    return body["data"]


def query(url: str, promql: str, time_: float | None = None, timeout: float = 10.0) -> list:
    """Instant query; returns ``data.result`` (a list of {metric, value}; [] when no data).

    Raises ValueError on a PromQL error. A scalar result is returned as a one-element list.
    """
    params = {"query": promql}
    if time_ is not None:
        params["time"] = f"{time_:.3f}"
    data = _get(url, "/api/v1/query", params, timeout)
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": data["result"]}]
    return data["result"]


def query_range(url: str, promql: str, start: float, end: float, step: str = "1s", timeout: float = 10.0) -> list:
    data = _get(url, "/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                              "step": step}, timeout)
    return data["result"]


def config(url: str, timeout: float = 10.0) -> str:
    """The configuration Prometheus has loaded (YAML text), e.g. to see which scrape jobs it runs."""
    return _get(url, "/api/v1/status/config", {}, timeout)["yaml"]


def targets(url: str, timeout: float = 10.0) -> list[dict]:
    """Active scrape targets ({labels, health, lastError, scrapeUrl, ...})."""
    return _get(url, "/api/v1/targets", {"state": "active"}, timeout)["activeTargets"]


def wait_targets_up(url: str, expected: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    active: list[dict] = []
    while time.monotonic() < deadline:
        active = targets(url)
        if sum(t.get("health") == "up" for t in active) >= expected:
            return active
        time.sleep(0.5)
    raise TimeoutError(f"fewer than {expected} targets up after {timeout}s: "
                       f"{[(t.get('scrapeUrl'), t.get('health'), t.get('lastError')) for t in active]}")


# ---- dashboards ----------------------------------------------------------------------------------

_VAR = re.compile(r"\$(?:\{(\w+)(?::[\w]+)?\}|(\w+))")


def substitute(expr: str, values: Mapping[str, str] | None = None, default: str = ".*") -> str:
    """Expand Grafana variables in a panel query the way Grafana would, for running it on Prometheus.

    ``$var``, ``${var}`` and ``${var:format}`` are replaced by ``values[var]``; built-in interval
    variables (``$__rate_interval`` -> 30s, ``$__interval`` -> 5s, ``$__range`` -> 5m) by
    ``BUILTINS`` unless ``values`` overrides them; any other template variable by ``default``
    (``.*``: the dashboards only use variables inside ``=~`` matchers, so ``.*`` means "All").
    Values are inserted verbatim: pass regex-escaped text if a value has regex metacharacters.
    """
    values = dict(values or {})

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in values:
            return str(values[name])
        if name in BUILTINS:
            return BUILTINS[name]
        return default

    return _VAR.sub(repl, expr)


def _walk_panels(panels: list[dict]) -> Iterable[dict]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels") or [])  # collapsed rows nest their panels


def dashboard_queries(directory: str | Path = DASHBOARD_DIR, values: Mapping[str, str] | None = None,
                      substituted: bool = True) -> list[tuple[str, str, str]]:
    """Every panel query of every dashboard as (dashboard file, panel title, expr).

    With ``substituted`` the Grafana variables are expanded by :func:`substitute` with ``values``
    (e.g. ``{"namespace": ns, "job": job_name}``; unset variables match everything).
    """
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in _walk_panels(dashboard.get("panels") or []):
            for target in panel.get("targets") or []:
                expr = target.get("expr")
                if expr:
                    out.append((path.name, panel.get("title", ""), substitute(expr, values) if substituted else expr))
    return out


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
