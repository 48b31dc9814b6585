"""Kubeflow's training-operator (the real PyTorchJob controller) run out of cluster for the benchmark.

Built from its Go module by devcluster/build-kubeflow.sh. Out of cluster it starts only after four
steps that its Helm/kustomize install otherwise does (found by running it, v1.8.1):

1. the namespace ``kubeflow`` (its cert rotator works there);
2. an empty Secret ``training-operator-webhook-cert`` in it, which the rotator fills;
3. an empty ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org`` whose CA
   bundle the rotator patches (no webhooks in it: the API server never calls out of the cluster);
4. once the Secret is filled, its ``ca.crt``, ``tls.crt`` and ``tls.key`` copied into
   ``/tmp/k8s-webhook-server/serving-certs/`` and the operator restarted. Otherwise it waits for
   the files and exits after 10 minutes with "could not mount certs".

Its settings are its defaults: 1 worker thread (``--controller-threads``) and controller-runtime's
client limits, QPS 20 and burst 30 (v1.8.1 has no flag for them; later versions added
``--kube-api-qps``). ``--enable-scheme=pytorchjob`` limits it to PyTorchJob.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "kubeflow"
SECRET = "training-operator-webhook-cert"
WEBHOOK = "validator.training-operator.kubeflow.org"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
DEFAULTS = {"threads": 1, "qps": 20, "burst": 30}


def build() -> Path:
    """The tool directory (binary + CRDs), built on first use (~9 min cold on 2 cores)."""
    out = subprocess.run(["bash", str(REPO / "devcluster" / "build-kubeflow.sh")], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError("devcluster/build-kubeflow.sh failed: it prints the failing step and its log above")
    return Path(out.stdout.strip().splitlines()[-1])


class TrainingOperator:
    """The training-operator as a process: ``start()`` runs the four steps, ``stop()`` ends it."""

    def __init__(self, kubectl, kubeconfig: Path, log_path: Path, *, threads: int = DEFAULTS["threads"],
                 metrics_port: int = 18480,
                 probe_port: int = 18481, webhook_port: int = 18443) -> None:
        self.kubectl, self.kubeconfig, self.log_path = kubectl, kubeconfig, log_path
        self.settings = {**DEFAULTS, "threads": threads}
        self.ports = (metrics_port, probe_port, webhook_port)
        self.tool = build()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}/metrics"

    def start(self, timeout: float = 180) -> None:
        for crd in sorted((self.tool / "crds").glob("kubeflow.org_*.yaml")):  # not its kustomization.yaml
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        for manifest in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                         {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}},
                         {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                          "metadata": {"name": WEBHOOK}}):
            self.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
        self._spawn()
        deadline = time.monotonic() + timeout
        while not self._copy_certs():
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"training-operator: its cert rotator did not fill Secret {NAMESPACE}/{SECRET}")
            time.sleep(1)
        self.stop()
        self._spawn()  # now it finds its serving certificate and starts its controllers
        while not self._ready():
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"training-operator did not become ready; see {self.log_path}")
            time.sleep(0.5)

    def _spawn(self) -> None:
        metrics, probe, webhook = self.ports
        args = [str(self.tool / "training-operator"), "--enable-scheme=pytorchjob",
                f"--metrics-bind-address=127.0.0.1:{metrics}", f"--health-probe-bind-address=127.0.0.1:{probe}",
                f"--webhook-server-port={webhook}", f"--controller-threads={self.settings['threads']}"]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBEFLOW_NAMESPACE": "",
               "POD_NAMESPACE": NAMESPACE}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _copy_certs(self) -> bool:
        out = self.kubectl("-n", NAMESPACE, "get", "secret", SECRET, "-o", "json", check=False)
        data = (json.loads(out.stdout).get("data") or {}) if out.returncode == 0 else {}
        if not all(k in data for k in ("ca.crt", "tls.crt", "tls.key")):
            return False
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for key in ("ca.crt", "tls.crt", "tls.key"):
            (CERT_DIR / key).write_bytes(base64.b64decode(data[key]))
        return True

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[1]}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"training-operator exited: {tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
