"""The processes on top of the control plane that make a job really train: the node agent
(runs rank pods as local processes), the operator, and a Prometheus that discovers trainer pods
through the Kubernetes API like a PodMonitor would.

Used by ``make dev`` (devcluster/dev.py) and the end-to-end tests. Every process is started in
its own session with a pid file in ``.devcluster/pids/`` so ``make cluster-down`` stops it too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STATE = REPO / ".devcluster"
KUBECONFIG = STATE / "kubeconfig"
PIDS, LOGS, RUN = STATE / "pids", STATE / "logs", STATE / "run"
AGENT_STATE = STATE / "agent"
LOCAL_POOL = "local"
LOCAL_TOLERATION = {"key": "dpjob.io/agent", "operator": "Exists", "effect": "NoSchedule"}


@dataclass
class Proc:
    name: str
    pid: int
    log: Path

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
            stat = Path(f"/proc/{self.pid}/stat").read_text()
            return stat.split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def stop(self, timeout: float = 20.0) -> None:
        if not self.alive():
            return
        os.killpg(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
        try:
            os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pass
        (PIDS / f"{self.name}.pid").unlink(missing_ok=True)
        sd = existing(f"{self.name}-sd")  # a Prometheus' pod discovery goes with it
        if sd:
            sd.stop(timeout)


def source_pythonpath() -> str:
    """This checkout's packages first, so a process never runs another checkout's editable install
    (the cached venv is shared by every clone on the machine)."""
    own = [str(REPO / "operator"), str(REPO / "trainer-image"), str(REPO)]
    return os.pathsep.join(own + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def _spawn(name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
    for d in (PIDS, LOGS, RUN):
        d.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    with open(log, "ab") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                                             "PYTHONPATH": source_pythonpath(), **(env or {})})
    (PIDS / f"{name}.pid").write_text(str(proc.pid))
    return Proc(name, proc.pid, log)


def existing(name: str) -> Proc | None:
    try:
        proc = Proc(name, int((PIDS / f"{name}.pid").read_text()), LOGS / f"{name}.log")
    except (OSError, ValueError):
        return None
    return proc if proc.alive() else None


def _wait(what: str, check, proc: Proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n"
                               + proc.log.read_text(errors="replace")[-3000:])
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; see {proc.log}")


def start_agent(python: str, nodes: int = 2) -> Proc:
    """The local node agent: nodes ``local-<i>`` (pool ``local``) that really run pods."""
    proc = existing("nodeagent")
    if proc:
        return proc
    ready = RUN / "agent-ready.json"
    ready.unlink(missing_ok=True)
    proc = _spawn("nodeagent", [python, "-m", "devcluster.nodeagent", "--kubeconfig", str(KUBECONFIG),
                                "--nodes", str(nodes), "--pool", LOCAL_POOL, "--python", python,
                                "--state-dir", str(AGENT_STATE), "--ready-file", str(ready),
                                # the trainer image's code, as its site-packages would hold it
                                "--env", f"PYTHONPATH={REPO / 'trainer-image'}"])
    _wait("the node agent's nodes", ready.exists, proc, 60)
    return proc


def operator_config(local_cpu_pool: bool) -> Path:
    """Operator config for the dev stack: the cpu pool maps to the agent's nodes."""
    cfg: dict = {"resyncSeconds": 5}
    if local_cpu_pool:
        cfg["pools"] = {"cpu": {"deviceResource": None, "nodeSelector": {"dpjob.io/pool": LOCAL_POOL},
                                "tolerations": [LOCAL_TOLERATION], "defaultBackend": "gloo",
                                "env": {"OMP_NUM_THREADS": "1"}}}
    path = RUN / "operator-dev.json"
    RUN.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2))
    return path


def start_operator(python: str, metrics_port: int = 18080, health_port: int = 18081,
                   local_cpu_pool: bool = True) -> Proc:
    proc = existing("operator")
    if proc:
        return proc
    cfg = operator_config(local_cpu_pool)
    proc = _spawn("operator", [python, "-m", "dpjob_operator", "--config", str(cfg)],
                  env={"KUBECONFIG": str(KUBECONFIG), "DPJOB_METRICS_PORT": str(metrics_port),
                       "DPJOB_HEALTH_PORT": str(health_port)})
    _wait("operator /healthz", lambda: urllib.request.urlopen(
        f"http://127.0.0.1:{health_port}/healthz", timeout=1).status == 200, proc, 60)
    return proc


def prometheus_config(operator_targets: list[str], sd_file: Path, scrape_interval: str = "1s") -> dict:
    """Scrape the operator statically and the trainer pods found by devcluster/podsd.py.

    The labels mirror the chart's PodMonitor: ``namespace``, ``pod``, ``dpjob_job``, ``dpjob_rank``.
    """
    return {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": "dpjob-operator", "static_configs": [{"targets": operator_targets}]},
            {"job_name": "dpjob-trainers", "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}]},
        ],
    }


def start_prometheus(port: int = 19090, operator_targets: list[str] | None = None, name: str = "prometheus") -> Proc:
    proc = existing(name)
    if proc:
        return proc
    wd = STATE / name
    wd.mkdir(parents=True, exist_ok=True)
    cfg = wd / "prometheus.yml"
    sd_file = wd / "trainers.json"
    if not sd_file.exists():
        sd_file.write_text("[]")
    cfg.write_text(json.dumps(prometheus_config(operator_targets or ["127.0.0.1:18080"], sd_file), indent=2))
    if not existing(f"{name}-sd"):
        _spawn(f"{name}-sd", [sys.executable, str(REPO / "devcluster" / "podsd.py"), "--kubeconfig", str(KUBECONFIG),
                              "--out", str(sd_file)])
    proc = _spawn(name, ["/usr/bin/prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={wd / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"])
    _wait("prometheus /-/ready", lambda: urllib.request.urlopen(
        f"http://127.0.0.1:{port}/-/ready", timeout=1).status == 200, proc, 60)
    return proc


def promql(port: int, expr: str, at: float | None = None) -> list:
    import urllib.parse

    params = {"query": expr}
    if at is not None:
        params["time"] = str(at)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{urllib.parse.urlencode(params)}",
                                timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


def run_on_agent(job: dict) -> dict:
    """Make a DataParallelJob's pods land on the agent's nodes whatever the operator's pools say."""
    spec = job["spec"]["template"].setdefault("spec", {})
    spec.setdefault("nodeSelector", {})["dpjob.io/pool"] = LOCAL_POOL
    tolerations = spec.setdefault("tolerations", [])
    if LOCAL_TOLERATION not in tolerations:
        tolerations.append(dict(LOCAL_TOLERATION))
    return job


