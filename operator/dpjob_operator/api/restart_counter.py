"""The names shared by the in-place restart counter and its readers (builders/restart_rules.py).

The counter is an init container of every rank pod that restarts in place: it counts the pod's
restarts into ``COUNT_FILE`` and says in its termination message how the trainer's previous run
ended (``previous exit: N`` or ``previous exit: unknown``).
"""

from __future__ import annotations

COUNTER_CONTAINER = "dpjob-restart-count"
RUN_VOLUME = "dpjob-run"
RUN_DIR = "/run/dpjob"
COUNT_FILE = f"{RUN_DIR}/restart-count"
# The trainer writes these (dpjob_trainer/exit_record.py): "running" at start, "exit" with its code.
RUNNING_MARK = f"{RUN_DIR}/trainer-running"
EXIT_RECORD = f"{RUN_DIR}/trainer-exit"
PREVIOUS_EXIT = "previous exit: "


def previous_exit(message: str | None) -> int | None:
    """The trainer's previous exit code from the counter's termination message (None: unknown)."""
    for line in (message or "").splitlines():
        if line.startswith(PREVIOUS_EXIT):
            value = line[len(PREVIOUS_EXIT):].strip()
            return int(value) if value.lstrip("-").isdigit() else None
    return None
