"""Warm restarts: the trainer process is replaced inside its running container, torch already loaded.

With ``restartStrategy: InPlace`` the operator sets ``DPJOB_WARM_RESTARTS`` (the most restarts one
container may make this way) and ``DPJOB_WARM_RESTART_EXITS`` (the job's retriable exits). The
container's first process then becomes a supervisor: it imports torch and the trainer once, and
forks the training process from that warm state. When the training process ends with a retriable
exit (a peer lost: 75; a signal: SIGKILL, an OOM kill of the training process), the supervisor forks
a new one at once: no container restart, no ``import torch``, no init container. Every rank of the
gang does the same (the others lose a peer and exit 75), so each container's count of warm
restarts names the gang's generation within the pod's; the rendezvous checks it
(distributed.py). A permanent exit, a clean one, SIGTERM, or a spent budget ends the supervisor
with the training process's code: then the kubelet's restart rules (a restart of every container
of the pod) or the job's failure policy take over.

The operator cannot see a warm restart in the pod, so it learns of it from rank 0's metrics
(``dpjob_trainer_warm_restarts``, and which rank failed first with which code: ``warm_restart_*``)
and from the trainer's termination message at the end. Only then does it count it against
``backoffLimit``; the supervisor's own budget only bounds what happens between two reads.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from .handshake import WarmCause

BUDGET_ENV = "DPJOB_WARM_RESTARTS"
EXITS_ENV = "DPJOB_WARM_RESTART_EXITS"
#: Set in each training process: the warm restarts of this container before it.
ATTEMPT_ENV = "DPJOB_WARM_RESTART"
#: Set in a restarted training process: how the one before it ended, "<exit code> <unix time>".
PREVIOUS_ENV = "DPJOB_WARM_PREVIOUS_EXIT"
#: Set in each training process: a pipe to the supervisor; "cold" written there asks for a container restart.
COLD_FD_ENV = "DPJOB_WARM_COLD_FD"
ANY_FAILURE = "nonzero"
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WarmPolicy:
    budget: int
    retriable_exits: frozenset[int] | None  # None: every non-zero exit

    def retriable(self, code: int) -> bool:
        if code == 0:
            return False
        return self.retriable_exits is None or code in self.retriable_exits


def parse_exits(text: str) -> frozenset[int] | None:
    """``nonzero``, or a comma list of codes and ranges: ``75,128-255``."""
    text = text.strip()
    if text in ("", ANY_FAILURE):
        return None
    codes: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        codes.update(range(int(low), int(high or low) + 1))
    return frozenset(codes)


def warm_policy(environ: Mapping[str, str], metrics_port: int) -> WarmPolicy | None:
    """The policy, or None when warm restarts are off: not asked for, no budget, unreadable, or
    metrics off (the operator would never learn of a restart it must count)."""
    try:
        budget = int(environ.get(BUDGET_ENV, "0"))
        exits = parse_exits(environ.get(EXITS_ENV, ANY_FAILURE))
    except ValueError:
        return None
    if budget <= 0 or not metrics_port:
        return None
    return WarmPolicy(budget, exits)


def exit_code(wait_status: int) -> int:
    """A shell's exit code from ``waitpid``'s status: 128 + the signal for a killed process."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


def die_with_parent() -> None:
    """The training process ends with its supervisor (Linux ``PR_SET_PDEATHSIG``): in a container
    the kernel ends both anyway, but run by hand a killed supervisor must not leave it training."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@dataclass
class Supervisor:
    """Runs ``train`` in forked processes until one ends for good; returns that exit code."""

    policy: WarmPolicy
    train: Callable[[], int]
    clock: Callable[[], float] = time.time
    say: Callable[[str], None] = lambda line: _say(line)
    before_start: Callable[[], None] = lambda: None
    restarts: int = 0
    _child: int = 0
    _stopping: bool = False

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._forward)
        previous: str | None = None
        while True:
            code, cold = self._run_once(previous)
            ended = self.clock()
            if self._stopping or not self.policy.retriable(code):
                return code
            if cold:
                self.say(f"dpjob-trainer: the gang restarts its containers (see the line above); exiting {code} "
                         f"so that the kubelet restarts this one")
                return code
            if self.restarts >= self.policy.budget:
                self.say(f"dpjob-trainer: the training process exited {code}; {self.restarts} warm restart(s) "
                         f"spent, leaving the restart to the kubelet")
                return code
            self.restarts += 1
            previous = f"{code} {ended:.3f}"
            self.say(f"dpjob-trainer: the training process exited {code}; warm restart {self.restarts} "
                     f"of {self.policy.budget} in this container")

    def _run_once(self, previous: str | None) -> tuple[int, bool]:
        """(the training process's exit code, whether it asked for a container restart)."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.before_start()
        cold_read, cold_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the training process
            die_with_parent()
            os.close(cold_read)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.environ[COLD_FD_ENV] = str(cold_write)
            os.environ[ATTEMPT_ENV] = str(self.restarts)
            if previous is None:
                os.environ.pop(PREVIOUS_ENV, None)
            else:
                os.environ[PREVIOUS_ENV] = previous
            code = 1
            try:
                code = self.train()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(cold_write)
        self._child = pid
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        self._child = 0
        os.set_blocking(cold_read, False)  # a DataLoader worker of the dead process may still hold the pipe
        try:
            cold = os.read(cold_read, 16) == COLD
        except BlockingIOError:
            cold = False
        finally:
            os.close(cold_read)
        return exit_code(status), cold

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        """SIGTERM (the pod is stopping): the training process checkpoints and ends; no restart."""
        self._stopping = True
        if self._child:
            os.kill(self._child, signum)


COLD = b"cold"


def request_cold_restart(environ: Mapping[str, str] = os.environ) -> None:
    """From a training process: its gang moved on without it (handshake.py); its supervisor must not
    restart it warm but end, so that the kubelet restarts the container (a no-op without one)."""
    fd = environ.get(COLD_FD_ENV)
    if fd:
        with contextlib.suppress(OSError, ValueError):
            os.write(int(fd), COLD)


TERMINATION_LOG = "/dev/termination-log"
RECORD_FILE_ENV = "DPJOB_WARM_RECORD_FILE"
RECORD_PREFIX = "dpjob-trainer: warm restarts "


def record_warm_restarts(count: int, cause: WarmCause, stepped_at: float | None,
                         environ: Mapping[str, str] = os.environ) -> None:
    """Rank 0, at a clean end: the warm restarts of its gang generation and their cause, in its
    termination message, for the operator's books when the job ends within one progress read of
    them (the operator's api/warm_record.py reads this line). Only into a file that exists: the
    kubelet's ``/dev/termination-log`` in a pod (``DPJOB_WARM_RECORD_FILE`` names another)."""
    path = Path(environ.get(RECORD_FILE_ENV) or TERMINATION_LOG)
    if not path.is_file():
        return
    line = f"{RECORD_PREFIX}{count}; rank {cause.rank} exit {cause.exit_code} at {cause.failed_at:.3f}"
    if stepped_at is not None:
        line += f"; stepped at {stepped_at:.3f}"
    with contextlib.suppress(OSError):
        path.write_text(line + "\n")


def attempt(environ: Mapping[str, str]) -> int:
    """This training process's warm restarts before it (0 outside a supervisor)."""
    try:
        return max(0, int(environ.get(ATTEMPT_ENV, "0")))
    except ValueError:
        return 0


def previous_exit(environ: Mapping[str, str]) -> tuple[int, float] | None:
    """(exit code, unix time) of the training process this one replaced, if any."""
    code, _, ended = environ.get(PREVIOUS_ENV, "").partition(" ")
    try:
        return int(code), float(ended)
    except ValueError:
        return None
