"""What the operator learns from a rank pod restarted in place (the operator's
builders/restart_rules.py): the generation, and how this process's previous run ended.

A pod restarted in place keeps its environment, so ``DPJOB_RESTART_COUNT`` stays at the generation
the pod was created in; the restart counter (an init container, run again at every in-place
restart) keeps the restarts since in the file ``DPJOB_RESTART_COUNT_FILE``. After such a restart
the kubelet reports every container as killed (137), so the trainer leaves its real exit code
beside that file: ``trainer-running`` while it runs, ``trainer-exit`` with the code when it ends. A
run that left "running" and no exit was killed (SIGKILL, an OOM kill). Without the variable (not
restarted in place, or a run outside Kubernetes) nothing is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

COUNT_FILE_ENV = "DPJOB_RESTART_COUNT_FILE"


def restarts_in_place(environ: Mapping[str, str]) -> int:
    """The pod's restarts in place, from the counter's file (0 without one, or when unreadable)."""
    path = environ.get(COUNT_FILE_ENV)
    if not path:
        return 0
    try:
        return max(0, int(Path(path).read_text().strip()))
    except (OSError, ValueError):
        return 0


def _run_dir(environ: Mapping[str, str]) -> Path | None:
    path = environ.get(COUNT_FILE_ENV)
    return Path(path).parent if path else None


def mark_running(environ: Mapping[str, str] = os.environ) -> None:
    run = _run_dir(environ)
    if run is not None:
        with contextlib.suppress(OSError):
            (run / "trainer-exit").unlink(missing_ok=True)
            (run / "trainer-running").touch()


def record_exit(code: int, environ: Mapping[str, str] = os.environ) -> None:
    run = _run_dir(environ)
    if run is not None:
        with contextlib.suppress(OSError):
            (run / "trainer-exit").write_text(f"{code}\n")
