"""The dev cluster's processes: each started in its own session with its pid in ``pids/`` and its
output in ``logs/``, so ``down`` stops exactly what ``up`` started, and waits that give up as soon
as the process they wait for has exited. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcluster.state import LOGS, PIDS
from devcluster.waits import TimedOut, wait_until


def log(msg: str) -> None:
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


def read_pid(component: str) -> int | None:
    try:
        return int((PIDS / f"{component}.pid").read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie or a recycled pid does not count
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def start(component: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    """Start one component in its own session (so it survives the caller) and record its pid."""
    with open(LOGS / f"{component}.log", "ab") as logf:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, **(env or {})})
    (PIDS / f"{component}.pid").write_text(str(proc.pid))
    (PIDS / f"{component}.argv").write_text(json.dumps({"argv": argv, "env": env or {}}))
    return proc.pid


def revive(component: str) -> bool:
    """Start ``component`` again with the command line ``start`` recorded, if it has exited (as a
    kubelet restarts a static pod); True when it did. A cluster that is down has no pid to revive."""
    pid = read_pid(component)
    if pid is None or alive(pid):
        return False
    try:
        saved = json.loads((PIDS / f"{component}.argv").read_text())
    except (OSError, ValueError):
        return False
    log(f"{component} (pid {pid}) had exited; starting it again (its log: {LOGS / f'{component}.log'})")
    start(component, list(saved["argv"]), dict(saved.get("env") or {}) or None)
    return True


def stop(pid: int, timeout: float, poll: float) -> None:
    """SIGTERM the process group, SIGKILL it if it is still alive after ``timeout`` seconds."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(poll)
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)


def wait_for(what: str, check: Callable[[], Any], timeout: float, component: str | None = None) -> None:
    """Wait until ``check()`` is truthy (an exception from it means "not yet"); exit with the
    component's last log lines as soon as ``component`` has exited, or naming ``what`` on timeout."""
    def ready() -> Any:
        if component and not alive(read_pid(component)):
            tail = (LOGS / f"{component}.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"{component} exited while waiting for {what}; last log lines:\n{tail}")
        return check()
    try:
        wait_until(ready, timeout, 0.2, what=what, retry_on=(Exception,))
    except TimedOut:
        raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}; see {LOGS}") from None


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
