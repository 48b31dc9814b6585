"""Shared fixtures: the real local control plane, a namespace per test, and the operator process.

Anything that talks to the Kubernetes API talks to the real kube-apiserver started by
``devcluster/cluster.py``: there are no fake clients here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
DEVCLUSTER = REPO / ".devcluster"
KUBECONFIG = Path(os.environ.get("DPJOB_TEST_KUBECONFIG", DEVCLUSTER / "kubeconfig"))


def _source_pythonpath() -> str:
    from devcluster import stack

    return stack.source_pythonpath()


def _cluster_ready() -> bool:
    if not KUBECONFIG.exists():
        return False
    proc = subprocess.run([sys.executable, str(REPO / "devcluster" / "cluster.py"), "status"],
                          capture_output=True, text=True)
    return proc.returncode == 0


@pytest.fixture(scope="session")
def cluster() -> Path:
    """The kubeconfig of a running local cluster; brings one up if none is running."""
    if not _cluster_ready():
        bin_dir = subprocess.run(["bash", str(REPO / "devcluster" / "build.sh")], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
        subprocess.run([sys.executable, str(REPO / "devcluster" / "cluster.py"), "up", "--bin-dir", bin_dir,
                        "--python", sys.executable], check=True)
    os.environ["KUBECONFIG"] = str(KUBECONFIG)
    return KUBECONFIG


@pytest.fixture(scope="session")
def api(cluster: Path):
    """An official-client ApiClient bound to the local cluster."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster), client_configuration=cfg)
    return client.ApiClient(cfg)


@pytest.fixture(scope="session")
def core(api):
    from kubernetes import client

    return client.CoreV1Api(api)


@pytest.fixture()
def namespace(core, request) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (the namespace controller collects the rest)."""
    from kubernetes import client

    base = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")
    name = f"t-{''.join(c for c in base if c.isalnum() or c == '-')[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"dpjob.io/test": "true"})))
    yield name
    try:
        core.delete_namespace(name)
    except Exception:  # noqa: BLE001 - best effort; the next run does not depend on it
        pass


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the cluster's own kubectl (built from the same Kubernetes release)."""
    return subprocess.run([str(DEVCLUSTER / "bin" / "kubectl"), "--kubeconfig", str(KUBECONFIG), *args],
                          input=stdin, capture_output=True, text=True, check=check)


def wait_for(what: str, check, timeout: float = 30.0, interval: float = 0.25):
    """Poll ``check`` until it returns a truthy value; fail with ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


class OperatorProcess:
    """The operator as a real process (``python -m dpjob_operator``) against the local cluster."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.metrics_port = _free_port()
        self.health_port = _free_port()

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1",
               "DPJOB_METRICS_PORT": str(self.metrics_port), "DPJOB_HEALTH_PORT": str(self.health_port),
               "DPJOB_RESYNC_SECONDS": "5", "PYTHONPATH": _source_pythonpath(), **self.extra_env}
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "dpjob_operator"], env=env, stdout=logf,
                                     stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        wait_for("operator /healthz", self._healthy, timeout=60)

    def _healthy(self) -> bool:
        import urllib.request

        if self.proc and self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}; log: {self.log_path}\n"
                                 + self.log_path.read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1) as r:
                return r.status == 200
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
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()


def _die_with_parent() -> None:
    """An operator left behind by a killed test run would race the next one: tie it to us."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def crds(cluster: Path) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "crd/dataparalleljobs.dpjob.io", "--timeout=60s")


@pytest.fixture(scope="session")
def _operator_process(cluster: Path, crds) -> Iterator[OperatorProcess]:
    logs = DEVCLUSTER / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    op = OperatorProcess(cluster, logs / "operator-test.log")
    yield op
    op.stop()


@pytest.fixture()
def operator(_operator_process: OperatorProcess) -> OperatorProcess:
    """The operator as a process of this checkout, shared by the tests in their own namespaces.

    The Helm-installed operator pod (``make dev``, the e2e tests) watches every namespace too and
    would race it: it is scaled to zero first. Only one operator ever reconciles at a time.
    """
    from devcluster import stack

    stack.scale_operator(0)
    if _operator_process.proc is None or _operator_process.proc.poll() is not None:
        _operator_process.start()
    return _operator_process


@pytest.fixture(scope="session")
def _helm_operator(cluster: Path, crds) -> str:
    """``helm upgrade --install`` once per session, with the operator image of this checkout."""
    from devcluster import stack

    return stack.install_operator()


@pytest.fixture()
def operator_pod(_operator_process: OperatorProcess, _helm_operator: str) -> dict:
    """The operator as a user runs it: installed with Helm as a pod from the image built here.

    Returns the operator pod. The process operator is stopped first (see ``operator``).
    """
    from devcluster import stack

    _operator_process.stop()
    stack.scale_operator(1)
    pod = stack.operator_pod()
    assert pod is not None and pod["spec"]["containers"][0]["image"] == _helm_operator
    return pod
