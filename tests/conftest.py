"""Shared fixtures: the real local control plane, a namespace per test, and the operator process.

Anything that talks to the Kubernetes API talks to the real kube-apiserver started by
``devcluster/cluster.py``: there are no fake clients here. Helpers live in ``tests/support/``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from devcluster import processes
from tests.support.mindspore import require_mindspore
from tests.support.paths import DEVCLUSTER, KUBECONFIG, REPO
from tests.support.waits import wait_until

if TYPE_CHECKING:  # the kubernetes client is imported by the fixtures that need it: the MindSpore
    from tests.support.operator import OperatorProcess  # venv runs its tests without it


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cluster-tests", choices=("all", "only", "none"), default="all",
                     help="run every test (all), only those that use the local cluster (only), or only those "
                          "that do not (none: unit tests and local DDP runs, which `make test` runs on every core)")
    parser.addoption("--cluster-stream", choices=("all", "main", "side"), default="all",
                     help="all: every selected test in this session; main: all but the side_stream tests; side: "
                          "only those, under an operator of this session's own that runs only the jobs this "
                          "session makes (spec.managedBy), so the two sessions run side by side "
                          "(devcluster/test.sh)")


# The controller the side stream's jobs name in spec.managedBy: its operator runs them, and the
# main stream's operators (the process, the Helm-installed pod) leave them alone.
SIDE_STREAM_OPERATOR = "dpjob.io/test-side-stream"
SIDE_STREAM_LEASE = ("default", "dpjob-test-side-stream")


def _side_stream(config: pytest.Config) -> bool:
    return bool(config.getoption("--cluster-stream") == "side")


def pytest_configure(config: pytest.Config) -> None:
    if _side_stream(config):
        from tests.support import cluster as dpj

        dpj.OPERATOR_NAME["managedBy"] = SIDE_STREAM_OPERATOR


def _uses_cluster(item: pytest.Item) -> bool:
    return "cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--cluster-tests`` selects by whether a test uses the cluster fixture, ``--cluster-stream`` by
    the side_stream marker. Chaos drills run last:
    they restart control-plane processes, and no other test should pay for a component still
    recovering. The modules that use Kueue run together just before them, so that one Kueue
    install serves them all (the ``kueue`` fixture)."""
    choice, stream = config.getoption("--cluster-tests"), config.getoption("--cluster-stream")
    keep = [item for item in items
            if (choice == "all" or _uses_cluster(item) == (choice == "only"))
            and (stream == "all" or (item.get_closest_marker("side_stream") is not None) == (stream == "side"))]
    if len(keep) != len(items):
        kept = {id(item) for item in keep}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    with_kueue = {item.module for item in items if "kueue" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: (item.get_closest_marker("chaos") is not None,
                                 getattr(item, "module", None) in with_kueue))


def _next_module_uses(request: pytest.FixtureRequest, fixture: str) -> bool:
    """Whether the test after this module's last one (in the session's order) asks for ``fixture``."""
    items = request.session.items
    last = max((i for i, item in enumerate(items) if getattr(item, "module", None) is request.module), default=-1)
    return 0 <= last < len(items) - 1 and fixture in getattr(items[last + 1], "fixturenames", ())


# Control-plane processes that exit by design on an internal error: kube-scheduler ends itself when
# its cache is corrupted ("Scheduler cache is corrupted", seen with the alpha gang-scheduling path
# under a pod-watch relist). A real cluster's kubelet restarts them; during a test session, so does
# the reviver below, within a second, whether the exit happens between tests or in the middle of one.
REVIVED = ("kube-scheduler", "kube-controller-manager")
REVIVE_PERIOD = 1.0


class _Reviver:
    """A daemon thread that starts REVIVED components again when they have exited, and remembers
    each time it did so for the session's summary. It runs from the moment the session's cluster is
    ready (never while ``up`` is still clearing an earlier cluster's processes)."""

    def __init__(self) -> None:
        self.revived: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the thread and a test's setup never start the same one twice
        self._thread = threading.Thread(target=self._run, name="control-plane-reviver", daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def revive_now(self) -> None:
        if not self._thread.is_alive():
            return
        with self._lock:
            self._revive_dead()

    def _revive_dead(self) -> None:
        for component in REVIVED:
            if processes.revive(component):
                self.revived.append(f"{time.strftime('%H:%M:%S')} {component}")

    def _run(self) -> None:
        while not self._stop.wait(REVIVE_PERIOD):
            with contextlib.suppress(Exception):  # a cluster going down mid-check is not an error here
                self.revive_now()


_REVIVER = _Reviver()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _REVIVER.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _REVIVER.revived:
        terminalreporter.write_sep("-", "control-plane processes started again after they exited")
        for line in _REVIVER.revived:
            terminalreporter.write_line(f"{line} (.devcluster/logs/ says why)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.mindspore`` tests need the MindSpore venv: skipped without it, failed under CI.
    A cluster test starts with every control-plane process that can be restarted running. A chaos
    drill starts once the side stream (if one runs) is over: it breaks what every test relies on."""
    if item.get_closest_marker("mindspore") is not None:
        require_mindspore()
    if item.get_closest_marker("chaos") is not None:
        _wait_for_the_side_stream(item.config)
    if any(item.get_closest_marker(m) for m in ("integration", "e2e", "chaos")):
        _REVIVER.revive_now()


# devcluster/test.sh names the file the side stream's session writes when it ends.
SIDE_STREAM_DONE = "DPJOB_SIDE_STREAM_DONE"


def _wait_for_the_side_stream(config: pytest.Config) -> None:
    done = os.environ.get(SIDE_STREAM_DONE)
    if not done or Path(done).exists():
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\n[test] the chaos drills wait for the side stream to end ({done})")
    wait_until(lambda: Path(done).exists(), timeout=3600, interval=1, what="the side stream's tests to end")


def _cluster_ready() -> bool:
    if not KUBECONFIG.exists():
        return False
    proc = subprocess.run([sys.executable, str(REPO / "devcluster" / "cluster.py"), "status"],
                          capture_output=True, text=True)
    return proc.returncode == 0


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Path:
    """The kubeconfig of a running local cluster; brings one up if none is running."""
    if not _cluster_ready():
        bin_dir = subprocess.run(["bash", str(REPO / "devcluster" / "build.sh")], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
        subprocess.run([sys.executable, str(REPO / "devcluster" / "cluster.py"), "up", "--bin-dir", bin_dir,
                        "--python", sys.executable], check=True)
    os.environ["KUBECONFIG"] = str(KUBECONFIG)
    if not _side_stream(request.config):  # one session restarts the control plane's processes
        _REVIVER.start()
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
    with contextlib.suppress(Exception):  # best effort; the next run does not depend on it
        core.delete_namespace(name)


@pytest.fixture(scope="session")
def crds(cluster: Path) -> None:
    from devcluster import stack

    stack.apply_crds()


@pytest.fixture(scope="session")
def _operator_process(request: pytest.FixtureRequest, cluster: Path, crds) -> Iterator[OperatorProcess]:
    """The shared process operator. At the end of the session the Helm-installed operator gets back
    the replicas it had (the tests scale it to zero): after `make test` the dev cluster still
    reconciles what its user applies. The side stream's runs only its own jobs, on a Lease of its
    own, and leaves the Helm-installed operator alone."""
    from devcluster import stack
    from tests.support.operator import OperatorProcess

    logs = DEVCLUSTER / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if _side_stream(request.config):
        side = OperatorProcess(cluster, logs / "operator-test-side.log", lease=SIDE_STREAM_LEASE, supervised=True)
        yield side
        side.stop()
        return
    chart_replicas = stack.operator_replicas()
    op = OperatorProcess(cluster, logs / "operator-test.log", supervised=True)
    yield op
    op.stop()
    if chart_replicas and stack.operator_replicas() != chart_replicas:
        stack.give_back_operator(chart_replicas)


@pytest.fixture()
def operator(request: pytest.FixtureRequest, _operator_process: OperatorProcess) -> OperatorProcess:
    """The operator as a process of this checkout, shared by the tests in their own namespaces.

    The Helm-installed operator pod (``make dev``, the e2e tests) watches every namespace too: it
    is scaled to zero first (releasing the Lease both campaign for, so this process leads at
    once). Only one operator ever reconciles at a time, and leader election enforces it.
    """
    from devcluster import stack

    if not _side_stream(request.config):
        stack.scale_operator(0)
    if _operator_process.proc is None or _operator_process.proc.poll() is not None:
        _operator_process.start()
    return _operator_process


@pytest.fixture()
def no_operator(request: pytest.FixtureRequest, _operator_process: OperatorProcess) -> None:
    """No operator acts on this test's jobs: the session's process operator stopped, and (outside
    the side stream, whose jobs no other operator runs) the Helm-installed one scaled to zero."""
    from devcluster import stack

    _operator_process.stop()
    if not _side_stream(request.config):
        stack.scale_operator(0)


_KUEUE_KEPT: dict[str, bool] = {"for the next module": False}


@pytest.fixture(scope="module")
def kueue(request, api, cluster: Path, _operator_process: OperatorProcess) -> Iterator[None]:
    """A real Kueue v0.17 (devcluster/kueue.py) for the test modules that use it (they run one
    after the other), with the simulated cpu pool's ResourceFlavor; the process operator restarted
    so that it sees the Workload API. Both undone after the last of them: no other test pays for
    Kueue's webhooks."""
    from devcluster import kueue as dev_kueue
    from tests.support import kueue as kq

    _main_stream_only(request, "kueue")
    if not _KUEUE_KEPT["for the next module"]:
        dev_kueue.install()
        kq.delete_cluster_scoped(api, "resourceflavors", kq.FLAVOR)
        kq.create_cluster_scoped(api, "resourceflavors", kq.flavor())
        _operator_process.restart_if_running()
    _KUEUE_KEPT["for the next module"] = False
    yield
    if _next_module_uses(request, "kueue"):
        _KUEUE_KEPT["for the next module"] = True
        return
    kq.delete_cluster_scoped(api, "resourceflavors", kq.FLAVOR)
    dev_kueue.uninstall()
    _operator_process.restart_if_running()


def _main_stream_only(request: pytest.FixtureRequest, fixture: str) -> None:
    if _side_stream(request.config):
        pytest.fail(f"the {fixture} fixture changes what every test sees (Kueue, the Helm release): "
                    "a side_stream test cannot use it; drop the module's side_stream marker")


@pytest.fixture(scope="session")
def _helm_operator(request: pytest.FixtureRequest, cluster: Path, crds) -> str:
    """``helm upgrade --install`` once per session, with the operator image of this checkout."""
    from devcluster import stack

    _main_stream_only(request, "operator_pod")
    return stack.install_operator()


@pytest.fixture()
def operator_pod(_operator_process: OperatorProcess, _helm_operator: str) -> dict:
    """The operator as a user runs it: installed with Helm as a pod from the image built here.

    Returns the operator pod. The process operator is stopped first (see ``operator``).
    """
    from devcluster import stack
    from tests.support.cluster import lease_holder
    from tests.support.operator import LEASE_DURATION, dev_lease

    _operator_process.stop()  # SIGTERM: it releases the Lease the pod campaigns for
    stack.scale_operator(1)
    pod = stack.operator_pod()
    assert pod is not None and pod["spec"]["containers"][0]["image"] == _helm_operator
    # Ready is not leading (a standby is Ready too): wait until the pod holds the Lease.
    lease = dev_lease()
    wait_until(lambda: lease_holder(*lease).startswith(f"{pod['metadata']['name']}_"),
               timeout=LEASE_DURATION + 20, what=f"operator pod {pod['metadata']['name']} to lead")
    return pod
