"""The operator as a real process (``python -m dpjob_operator``) of this checkout against a cluster.

Integration tests, the Helm RBAC test (run with the chart's ServiceAccount token) and the scale
benchmark all start it the same way: its own metrics and health ports, a short resync, the
sources of this checkout on PYTHONPATH, and tied to the parent so a killed run leaves none behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waits import wait_until


class OperatorProcess:
    """Start, stop, restart the operator and read its /metrics."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.health_port = free_port()

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1",
               "DPJOB_METRICS_PORT": str(self.metrics_port), "DPJOB_HEALTH_PORT": str(self.health_port),
               "DPJOB_RESYNC_SECONDS": "5", "PYTHONPATH": _source_pythonpath(), **self.extra_env}
        with open(self.log_path, "ab") as logf:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, "-m", "dpjob_operator"], env=env, stdout=logf,
                                         stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        wait_until(self._healthy, timeout=60, what="operator /healthz")

    def _healthy(self) -> bool:
        if self.proc and self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}; log: {self.log_path}\n"
                                 + self.log_path.read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self, sig: int = 15) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text: str = r.read().decode()
        return text


def _source_pythonpath() -> str:
    from devcluster import stack

    path: str = stack.source_pythonpath()
    return path


def _die_with_parent() -> None:
    """An operator left behind by a killed test run would race the next one: tie it to us."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
