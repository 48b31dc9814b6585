"""The one way the dev tooling and the tests run kubectl: the cluster's own kubectl (built from the
same Kubernetes release) against a kubeconfig, the dev cluster's unless the caller names another.

Standard library only: ``devcluster/cluster.py`` runs before the project's virtual environment exists.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from devcluster.state import BIN, KUBECONFIG


class KubectlFailed(subprocess.CalledProcessError, RuntimeError):
    """kubectl exited non-zero. Both a CalledProcessError (``returncode``, ``cmd``, ``stderr``) and a
    RuntimeError, so callers that catch either keep working; its message is kubectl's own error."""

    def __init__(self, returncode: int, cmd: list[str], stdout: str, stderr: str, args: tuple[str, ...]) -> None:
        super().__init__(returncode, cmd, stdout, stderr)
        self.kubectl_args = args

    def __str__(self) -> str:
        return f"kubectl {' '.join(self.kubectl_args)} failed: {(self.stderr or '').strip()}"


def kubectl(*args: str, stdin: str | None = None, check: bool = True, timeout: float | None = 300,
            kubeconfig: Path | None = None, binary: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``kubectl --kubeconfig <kubeconfig> <args>`` and return its output (text).

    ``check``: a non-zero exit raises :class:`KubectlFailed`. ``timeout`` (seconds) bounds a kubectl
    that hangs; every wait the callers ask of kubectl itself (``--timeout=120s``) is shorter.
    """
    cmd = [str(binary or BIN / "kubectl"), "--kubeconfig", str(kubeconfig or KUBECONFIG), *args]
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise KubectlFailed(out.returncode, cmd, out.stdout, out.stderr, args)
    return out
