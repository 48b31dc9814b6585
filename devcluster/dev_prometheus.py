"""The dev cluster's Prometheus 3: a process on this machine that discovers the trainer and
operator pods through the API server (as the chart's PodMonitor and ServiceMonitor would), with a
pid file in ``.devcluster/pids/`` so ``make cluster-down`` stops it too.

Used through devcluster/stack.py by ``make dev`` and the end-to-end tests; the process itself is
started by devcluster/prometheus.py, the one way this repository starts a Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devcluster import prometheus as promsupport
from devcluster.operator_release import METRICS_TOKEN, write_metrics_token
from devcluster.processes import alive, stop
from devcluster.state import KUBECONFIG, LOGS, PIDS, RUN, STATE


@dataclass
class Proc:
    name: str
    pid: int
    log: Path

    def alive(self) -> bool:
        return alive(self.pid)

    def stop(self, timeout: float = 20.0) -> None:
        if self.alive():
            stop(self.pid, timeout, poll=0.1)
        (PIDS / f"{self.name}.pid").unlink(missing_ok=True)
        (RUN / f"{self.name}.port").unlink(missing_ok=True)


def existing(name: str, port: int | None = None) -> Proc | None:
    """The live process recorded under ``name``; with ``port``, only if it serves that port.

    A Prometheus left by an interrupted run on another port is not what the caller asked for:
    reusing it would send the caller's queries to a port where nothing listens.
    """
    try:
        proc = Proc(name, int((PIDS / f"{name}.pid").read_text()), LOGS / f"{name}.log")
    except (OSError, ValueError):
        return None
    if not proc.alive():
        return None
    if port is not None:
        try:
            recorded = int((RUN / f"{name}.port").read_text())
        except (OSError, ValueError):
            recorded = None
        if recorded != port:
            proc.stop()
            return None
    return proc


def cluster_prometheus(port: int = 19090, operator_targets: list[str] | None = None,
                       name: str = "prometheus") -> Proc:
    """Prometheus 3 on 127.0.0.1:<port>, discovering pods through the API server; recorded under
    ``name`` in ``pids/`` (``make cluster-down`` stops it) and reused while it serves that port."""
    proc = existing(name, port)
    if proc:
        return proc
    for d in (PIDS, LOGS, RUN):
        d.mkdir(parents=True, exist_ok=True)
    write_metrics_token()
    token = METRICS_TOKEN if METRICS_TOKEN.read_text() else None
    log = LOGS / f"{name}.log"
    popen = promsupport.start_prometheus(
        port, workdir=STATE / name, log=log, flags=promsupport.CLUSTER_FLAGS,
        config=promsupport.render_cluster_config(KUBECONFIG, operator_targets or [], token_file=token))
    (PIDS / f"{name}.pid").write_text(str(popen.pid))
    (RUN / f"{name}.port").write_text(str(port))
    try:
        promsupport.wait_ready(f"http://127.0.0.1:{port}", 60, popen)
    except TimeoutError:
        raise RuntimeError(f"prometheus on port {port} not ready after 60s; see {log}") from None
    return Proc(name, popen.pid, log)


def promql(port: int, expr: str, at: float | None = None) -> list:
    return promsupport.query(f"http://127.0.0.1:{port}", expr, at)
