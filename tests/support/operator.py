"""The operator as a real process (``python -m dpjob_operator``) of this checkout against a cluster.

Integration tests, the Helm RBAC test (run with the chart's ServiceAccount token) and the scale
benchmark all start it the same way: its own metrics and health ports, a short resync, the
sources of this checkout on PYTHONPATH, and tied to the parent so a killed run leaves none behind.

Leader election is on, on the same Lease as the Helm-installed dev operator (release
``dpjob-operator`` in ``dpjob-system``) unless a test names another: the two exclude each other
for real, not only because the fixtures scale one to zero. ``start`` returns once this process
leads (``wait_to_lead``), so a test never times a job against a standby; ``stop`` (SIGTERM)
releases the Lease, so whichever operator comes next leads within a retry period.

Every such process runs the jobs this test session makes (``spec.managedBy``: the default
controller, or the side stream's own when ``devcluster/test.sh`` runs two sessions at once), and no
other session's.

The shared operator of the tests is ``supervised``: started again when it exits on its own, as the
kubelet restarts the operator's pod. A leader that cannot renew its Lease within the renew
deadline (an API server slowed down by a thousand pods, or restarted by a chaos drill) exits by
design; unsupervised, every job after it would wait on a controller that is gone. Each such exit
is kept in ``exits`` (code and log tail) and printed, so a crash is still seen.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from tests.support.cluster import controller_name, kubectl, lease_holder
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waits import wait_until

# The operator's count of reconcile passes (controller-runtime's name; operator/dpjob_operator/metrics.py).
RECONCILES = "controller_runtime_reconcile_total"

# operator/dpjob_operator/api/lease.py: LeaseTimings().lease_duration. A dead holder's Lease is
# taken over this long after it stopped renewing; a released one at the next retry.
LEASE_DURATION = 10


def dev_lease() -> tuple[str, str]:
    """The Lease of the Helm-installed dev operator: ``<fullname>-leader`` in its namespace."""
    from devcluster import stack

    return stack.OPERATOR_NAMESPACE, f"{stack.OPERATOR_DEPLOYMENT}-leader"


# An operator run as a process on this machine listens on loopback only, and its /metrics is open:
# the chart's in-cluster default (0.0.0.0 behind API-server authorization) is tested on its own.
LOCAL_PROCESS_ENV = {"DPJOB_METRICS_BIND_ADDRESS": "127.0.0.1", "DPJOB_HEALTH_BIND_ADDRESS": "127.0.0.1",
                     "DPJOB_METRICS_AUTH": "none"}


class OperatorProcess:
    """Start, stop, restart the operator and read its /metrics, /healthz and Lease."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str] | None = None, *,
                 lease: tuple[str, str] | None = None, leader_election: bool = True,
                 wait_to_lead: bool = True, supervised: bool = False) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_env = extra_env or {}
        self.lease = lease
        self.leader_election = leader_election
        self.wait_to_lead = wait_to_lead
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.supervised = supervised
        self.exits: list[tuple[int, str]] = []  # (exit code, log tail) of each exit the supervisor saw
        self._lock = threading.RLock()
        self._stopping = False
        self._supervisor: threading.Thread | None = None

    def start(self, wait: bool = True) -> None:
        """Start the process; with ``wait``, return once /healthz answers (and it leads, where it
        should): a test that starts it while the API server is unreachable waits on its own signal."""
        with self._lock:
            self._stopping = False
            self._spawn()
        if self.supervised and (self._supervisor is None or not self._supervisor.is_alive()):
            self._supervisor = threading.Thread(target=self._supervise, daemon=True, name="operator-supervisor")
            self._supervisor.start()
        if not wait:
            return
        wait_until(self._healthy, timeout=60, what="operator /healthz")
        if self.leader_election and self.wait_to_lead:
            self.wait_leading(timeout=LEASE_DURATION + 20)

    def _supervise(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                proc = self.proc
                if self._stopping or proc is None or proc.poll() is None:
                    continue
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.exits.append((proc.returncode, tail))
                print(f"\n[operator] exited on its own with {proc.returncode}; started again, as its pod would be. "
                      f"Last log lines:\n{tail[-600:]}", file=sys.stderr, flush=True)
                self._spawn()

    def _spawn(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1",
               "DPJOB_METRICS_PORT": str(self.metrics_port), "DPJOB_HEALTH_PORT": str(self.health_port),
               **LOCAL_PROCESS_ENV,
               "DPJOB_RESYNC_SECONDS": "5", "DPJOB_STUCK_TERMINATING_SECONDS": "5",
               "DPJOB_CONTROLLER_NAME": controller_name(),  # runs the jobs this test session makes
               "PYTHONPATH": _source_pythonpath(), **self._election_env(),
               **self.extra_env}
        with open(self.log_path, "ab") as logf:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, "-m", "dpjob_operator"], env=env, stdout=logf,
                                         stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                         preexec_fn=_die_with_parent)

    # ---- leader election --------------------------------------------------------------------

    def _election_env(self) -> dict[str, str]:
        if not self.leader_election:
            return {"DPJOB_LEADER_ELECTION": "false"}
        namespace, name = self.lease_key
        if kubectl("get", "namespace", namespace, check=False).returncode != 0:
            kubectl("create", "namespace", namespace, check=False)  # the Helm install may come later
        # No DPJOB_POD_NAME: the identity is <hostname>_<pid>, which ``identity`` can tell.
        return {"DPJOB_LEADER_ELECTION": "true", "DPJOB_LEADER_ELECTION_NAMESPACE": namespace,
                "DPJOB_LEADER_ELECTION_LEASE_NAME": name, "DPJOB_POD_NAME": ""}

    @property
    def lease_key(self) -> tuple[str, str]:
        return self.lease or dev_lease()

    @property
    def identity(self) -> str:
        """What this process writes into the Lease as its holderIdentity."""
        assert self.proc is not None, "not started"
        return f"{socket.gethostname()}_{self.proc.pid}"

    def holder(self) -> str:
        return lease_holder(*self.lease_key)

    def leading(self) -> bool:
        return self.holder() == self.identity

    def wait_leading(self, timeout: float) -> float:
        """Seconds until the Lease names this process; fails naming the holder that kept it."""
        started = time.monotonic()
        try:
            wait_until(lambda: self._healthy() and self.leading(), timeout=timeout, interval=0.2,
                       what=f"operator {self.identity} to lead")
        except AssertionError as e:
            raise AssertionError(f"{e}; lease {'/'.join(self.lease_key)} is held by {self.holder()!r} "
                                 "(the Helm-installed operator? scale it to 0 first)") from None
        return time.monotonic() - started

    def role(self) -> str:
        """``leader`` or ``standby`` from /healthz (kopf caches probe results for up to 10 s)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5) as r:
            return str(json.loads(r.read()).get("role"))

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _healthy(self) -> bool:
        if self.proc and self.proc.poll() is not None and not self.supervised:
            raise AssertionError(f"operator exited with {self.proc.returncode}; log: {self.log_path}\n"
                                 + self.log_path.read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self, sig: int = 15) -> None:
        """SIGTERM (the default) is a graceful stop: the workers stop and the Lease is released."""
        with self._lock:
            self._stopping = True
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

    def restart_if_running(self) -> None:
        """Pick up a changed environment (``extra_env``, an API group installed since it started);
        a stopped operator gets it when it next starts."""
        if self.proc is not None and self.proc.poll() is None:
            self.restart()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text: str = r.read().decode()
        return text

    def passes(self) -> tuple[int, float]:
        """(pid, reconcile passes so far) of the running process: a mark for ``wait_passes``."""
        assert self.proc is not None, "not started"
        pid = self.proc.pid
        try:
            return pid, metric_sum(self.metrics(), RECONCILES)
        except OSError:  # started again (supervised) and not serving yet: none of its passes made
            return pid, 0.0

    def wait_passes(self, n: int, mark: tuple[int, float], timeout: float, what: str) -> None:
        """Until the operator has made ``n`` more reconcile passes since ``mark``: a signal that it
        has looked at its jobs again, where a test would otherwise wait "long enough" for a wrong
        view to be acted on. A process started again since ``mark`` counts from its start."""
        def grown() -> bool:
            pid, now = self.passes()
            return now - (mark[1] if pid == mark[0] else 0) >= n

        wait_until(grown, timeout=timeout, interval=0.5, what=f"{n} more reconcile passes ({what})")


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples in a /metrics page, over every label set that has ``labels``,
    read by prometheus_client's own parser. A counter is named without its ``_total``, as the
    parser names its family."""
    from prometheus_client.parser import text_string_to_metric_families

    family = name.removesuffix("_total")
    return sum(sample.value for fam in text_string_to_metric_families(text) if fam.name == family
               for sample in fam.samples
               if sample.name in (name, family) and labels.items() <= sample.labels.items())


def _source_pythonpath() -> str:
    from devcluster import stack

    path: str = stack.source_pythonpath()
    return path


def _die_with_parent() -> None:
    """An operator left behind by a killed test run would race the next one: tie it to us."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
