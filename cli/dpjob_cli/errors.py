"""The one exception the CLI shows to a user, and the exit codes it maps to.

Every failure a user can cause or meet (a missing script, no cluster, an unknown job, a spec the
API server refuses) becomes a ``CliError``: one line on stderr and a documented exit code, never a
traceback. The codes are listed in docs/cli.md; scripts and CI branch on them, so they are stable.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Documented exit codes (docs/cli.md). Never renumber: callers branch on them."""

    OK = 0  # the command worked; for run/wait: the job Succeeded
    JOB_FAILED = 1  # the job ended Failed (run, wait)
    USAGE = 2  # bad flags or arguments (click's own code)
    NO_CLUSTER = 3  # no kubeconfig, unreachable API server, rejected credentials
    CRD_MISSING = 4  # the DataParallelJob CRD is not installed
    NOT_FOUND = 5  # no such job
    INVALID_SPEC = 6  # the API server (CRD schema, CEL) or the operator's parser refuses the spec
    BAD_INPUT = 7  # a local file: missing script, too big for a ConfigMap, unreadable YAML
    TIMEOUT = 8  # --timeout elapsed before the job finished
    API_ERROR = 9  # any other refusal: forbidden, already exists, server error
    INTERNAL = 70  # a bug in dpjob itself (EX_SOFTWARE); DPJOB_DEBUG=1 prints the traceback
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); a followed job keeps running


class CliError(Exception):
    """A failure with one line for the user and the exit code that names its kind."""

    def __init__(self, code: ExitCode, message: str, details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        # Extra self-contained lines (e.g. one per invalid field); the first line stands alone.
        self.details = details

    def lines(self) -> list[str]:
        """What stderr shows: the message, then one line per detail."""
        return [self.message, *self.details]


class JobFailedError(CliError):
    """The job ended Failed; raised by ``JobHandle.wait(raise_on_failure=True)``."""

    def __init__(self, message: str) -> None:
        super().__init__(ExitCode.JOB_FAILED, message)


class WaitTimeoutError(CliError):
    """The job was still running when the caller's timeout elapsed."""

    def __init__(self, message: str) -> None:
        super().__init__(ExitCode.TIMEOUT, message)
