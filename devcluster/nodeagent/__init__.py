"""dpjob node agent: a stand-in kubelet for the local dev cluster that runs each pod's containers as
local processes in their own network namespace (see docs/nodeagent.md).

Start it from the shell::

    sudo $VENV/bin/python -m devcluster.nodeagent --kubeconfig .devcluster/kubeconfig --pool local

or from Python (tests, ``make dev``)::

    from devcluster.nodeagent import AgentProcess
    with AgentProcess(kubeconfig, pool="local", log_path="agent.log") as agent:
        ...  # nodes agent.nodes are Ready and schedulable here

Only this module is import-light (stdlib): the agent itself needs the ``kubernetes`` client.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parent.parent.parent


def agent_command(kubeconfig: str | os.PathLike, *, python: str = sys.executable, nodes: int = 1,
                  name_prefix: str = "local", pool: str = "local", state_dir: str | os.PathLike | None = None,
                  bridge: str = "dpjob0", cidr: str = "10.250.0.0/16", pod_python: str | None = None,
                  labels: dict[str, str] | None = None, capacity: dict[str, str] | None = None,
                  env: dict[str, str] | None = None, taint: bool = True, kubelet_port: int = 10250,
                  ready_file: str | os.PathLike | None = None, delete_nodes_on_exit: bool = True,
                  extra: Sequence[str] = ()) -> list[str]:
    """The argv that starts the agent (run it from any directory: it uses absolute paths)."""
    cmd = [python, str(REPO / "devcluster" / "nodeagent" / "__main__.py"), "run", "--kubeconfig", str(kubeconfig),
           "--nodes", str(nodes), "--name-prefix", name_prefix, "--pool", pool, "--bridge", bridge, "--cidr", cidr,
           "--python", pod_python or python, "--kubelet-port", str(kubelet_port)]
    if state_dir:
        cmd += ["--state-dir", str(state_dir)]
    if labels:
        cmd += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
    for k, v in (capacity or {}).items():
        cmd += ["--capacity", f"{k}={v}"]
    for k, v in (env or {}).items():
        cmd += ["--env", f"{k}={v}"]
    if not taint:
        cmd.append("--no-taint")
    if not delete_nodes_on_exit:
        cmd.append("--no-delete-nodes-on-exit")
    if ready_file:
        cmd += ["--ready-file", str(ready_file)]
    return cmd + list(extra)


class AgentProcess:
    """The agent as a subprocess: ``start()`` returns once its nodes accept pods; ``stop()`` sends
    SIGTERM and waits (the agent stops its pods and deletes its nodes)."""

    def __init__(self, kubeconfig: str | os.PathLike, log_path: str | os.PathLike, *,
                 state_dir: str | os.PathLike | None = None, **options):
        self.log_path = Path(log_path)
        self.state_dir = Path(state_dir) if state_dir else REPO / ".devcluster" / "agent"
        self.ready_file = self.state_dir / "ready.json"
        self.cmd = agent_command(kubeconfig, state_dir=self.state_dir, ready_file=self.ready_file, **options)
        self.nodes = [f"{options.get('name_prefix', 'local')}-{i}" for i in range(options.get("nodes", 1))]
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60.0) -> "AgentProcess":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.ready_file.exists():
            self.ready_file.unlink()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"node agent exited with {self.proc.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"node agent not ready after {timeout}s; see {self.log_path}")
            time.sleep(0.2)
        return self

    def logs_file(self, namespace: str, pod: str, container: str) -> Path:
        return self.state_dir / "logs" / f"{namespace}_{pod}_{container}.log"

    def stop(self, timeout: float = 60.0) -> Optional[int]:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> "AgentProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
