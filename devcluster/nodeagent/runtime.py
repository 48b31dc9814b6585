"""Container processes: start one inside the pod's network namespace with a private mount and UTS
namespace (see ``launcher.py``), signal its process group, and wait for it.

The process tree of a container is one process group (``setsid``): ``ip netns exec`` execs ``unshare``
which execs the launcher which execs the command, so the PID the agent holds is the container's main
process and SIGTERM/SIGKILL go to the whole group.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

log = logging.getLogger("nodeagent.runtime")

LAUNCHER = Path(__file__).resolve().parent / "launcher.py"


@dataclass
class Mount:
    source: str
    target: str
    read_only: bool = False


def log_path(logs_dir: Path, namespace: str, pod: str, container: str) -> Path:
    return Path(logs_dir) / f"{namespace}_{pod}_{container}.log"


def open_log(logs_dir: Path, namespace: str, pod: str, container: str, uid: str):
    """The container's log file, opened for appending. A file left by an earlier pod of the same name
    (another UID) is moved aside to ``<name>.<old uid prefix>.log`` first, as ``kubectl logs`` shows
    the current pod only."""
    path = log_path(logs_dir, namespace, pod, container)
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = path.with_name(path.name + ".uid")
    if path.exists():
        old = owner.read_text().strip() if owner.exists() else ""
        if old != uid:
            path.rename(path.with_name(f"{path.stem}.{(old or 'old')[:8]}.log"))
    owner.write_text(uid)
    return open(path, "ab", buffering=0)


def start_container(*, netns: str, spec_path: Path, hostname: str, mounts: list[Mount], working_dir: str,
                    fallback_dir: Path, env: Mapping[str, str], argv: list[str], log_file) -> subprocess.Popen:
    """Start the container's process; stdout and stderr go to ``log_file``."""
    spec: dict[str, Any] = {
        "hostname": hostname,
        "mounts": [{"source": m.source, "target": m.target, "readOnly": m.read_only} for m in mounts],
        "workingDir": working_dir,
        "fallbackDir": str(fallback_dir),
        "env": dict(env),
        "argv": argv,
    }
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    cmd = ["ip", "netns", "exec", netns, "unshare", "--mount", "--uts", "--propagation", "private", "--",
           sys.executable, "-I", "-S", str(LAUNCHER), str(spec_path)]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True,
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``pid``; False when it is gone."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def exit_code(returncode: Optional[int]) -> int:
    """Popen's return code as a container exit code (signal N -> 128+N)."""
    if returncode is None:
        return 0
    return 128 - returncode if returncode < 0 else returncode


def kill_leftovers(pids: list[int]) -> None:
    """SIGKILL process groups an earlier agent left behind (its children outlived it)."""
    for pid in pids:
        if group_alive(pid):
            log.info("killing leftover process group %d", pid)
            signal_group(pid, signal.SIGKILL)
