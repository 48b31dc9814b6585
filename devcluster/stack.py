"""What runs on top of the cluster so a job really trains and is seen: the operator installed with
Helm as a pod from the image built here, and a Prometheus 3 that discovers the trainer and
operator pods through the API server (as the chart's PodMonitor and ServiceMonitor would).

Used by ``make dev`` (devcluster/dev.py) and the end-to-end tests. Prometheus runs as a process
with a pid file in ``.devcluster/pids/`` so ``make cluster-down`` stops it too; the operator is a
Deployment, so the cluster owns it.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import cluster, publish, realnode, registry  # noqa: E402
from devcluster import prometheus as promsupport  # noqa: E402

STATE = cluster.STATE
KUBECONFIG = cluster.KUBECONFIG
PIDS, LOGS, RUN = cluster.PIDS, cluster.LOGS, cluster.RUN
# One install command everywhere (README, docs/install.md, make dev, the tests):
#   helm install dpjob oci://<registry>/charts/dpjob-operator --version <version> -n dpjob-system
RELEASE, OPERATOR_NAMESPACE = "dpjob", "dpjob-system"
OPERATOR_DEPLOYMENT = "dpjob-dpjob-operator"  # the chart's fullname for this release name
# Rank pods' shared directory on the real node: checkpoints outlive the pods (a PVC on a real
# cluster) and the tests read the trainers' reports from it.
SHARED_DIR = Path("/tmp/dpjob")


def kubectl(*args: str, stdin: str | None = None, check: bool = True, timeout: float = 300
            ) -> subprocess.CompletedProcess:
    out = subprocess.run([str(STATE / "bin" / "kubectl"), "--kubeconfig", str(KUBECONFIG), *args],
                         input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out


def apply_crds(timeout: float = 60) -> None:
    """Apply crds/ and wait until the API server serves every CRD (condition Established).

    Not ``kubectl wait --for=condition=Established``: on a CRD created a moment ago it can read the
    object before the API server has written any condition and fail at once ("accessor error:
    <nil> is of the type <nil>"), which broke ``make dev`` on a fresh machine."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    names = kubectl("get", "-f", str(REPO / "crds"), "-o", "name").stdout.split()
    query = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + timeout
    for name in names:
        while kubectl("get", name, "-o", query, check=False).stdout.strip() != "True":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} is not Established after {timeout:.0f}s; "
                                   f"see kubectl describe {name} (is the API server healthy?)")
            time.sleep(0.2)


def source_pythonpath() -> str:
    """This checkout's packages first, so a process never runs another checkout's editable install
    (the cached venv is shared by every clone on the machine)."""
    own = [str(REPO / "operator"), str(REPO / "trainer-image"), str(REPO)]
    return os.pathsep.join(own + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


# ------------------------------------------------------------------------------ the operator


def operator_values(image_ref: str, extra: dict | None = None) -> dict:
    """Helm values for the dev cluster: the local image, the real node, and the cpu pool there."""
    repository, tag = image_ref.rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
        "nodeSelector": {"dpjob.io/pool": realnode.POOL},
        "tolerations": [realnode.TOLERATION],
        "resyncSeconds": 5,
        "pools": {"cpu": {"deviceResource": None, "nodeSelector": {"dpjob.io/pool": realnode.POOL},
                          "tolerations": [realnode.TOLERATION], "env": {"OMP_NUM_THREADS": "1"}}},
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
    }
    for key, value in (extra or {}).items():
        values[key] = value
    return values


def install_operator(extra_values: dict | None = None, timeout: str = "180s") -> str:
    """``helm upgrade --install`` the chart from the dev registry, with the operator image built
    here and pushed there; waits until the pod is Ready.

    Returns the image reference. The chart is installed exactly as a user installs it: packaged,
    pushed to an OCI registry and installed from there, its ServiceAccount, RBAC, security context
    and probes all in play.
    """
    image = node_images("operator")["operator"]
    helm_bin = str(STATE / "bin" / "helm")
    version = publish.source_version()
    chart = publish.push_chart(registry.DEV_REPOSITORY, helm_bin, version)
    values = RUN / "operator-values.json"
    values.write_text(json.dumps(operator_values(image, extra_values), indent=2))
    helm = subprocess.run([helm_bin, "--kubeconfig", str(KUBECONFIG), "upgrade", "--install",
                           RELEASE, chart, "--version", version, *publish.helm_plain_http(registry.DEV_REPOSITORY),
                           "-n", OPERATOR_NAMESPACE, "--create-namespace", "-f", str(values),
                           # apply_crds owns the CRD on this cluster (tests and benchmarks apply it
                           # without Helm): the release renders none.
                           "--set", "crds.install=false", "--wait", f"--timeout={timeout}"],
                          capture_output=True, text=True)
    if helm.returncode != 0:
        pods = kubectl("-n", OPERATOR_NAMESPACE, "get", "pods", "-o", "wide", check=False).stdout
        logs = kubectl("-n", OPERATOR_NAMESPACE, "logs", f"deploy/{OPERATOR_DEPLOYMENT}", "--tail=30",
                       check=False).stdout
        raise RuntimeError(f"helm install of the operator failed: {helm.stderr.strip()}\n{pods}\n{logs}")
    scale_operator(1)
    write_metrics_token()
    return image


# The chart's scraper identity (metrics.reader): its token lets a Prometheus on this machine read
# the operator pod's /metrics, which answers only tokens the API server authorizes.
METRICS_TOKEN = RUN / "operator-metrics-token"
METRICS_READER_SECRET = f"{OPERATOR_DEPLOYMENT}-metrics-reader-token"


def write_metrics_token(timeout: float = 60) -> None:
    """Copy the reader's token into METRICS_TOKEN (Prometheus re-reads it at every scrape); empty
    when the chart is not installed. The token controller fills the Secret a moment after install."""
    RUN.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    token = ""
    while operator_installed():
        out = kubectl("-n", OPERATOR_NAMESPACE, "get", "secret", METRICS_READER_SECRET,
                      "-o", "jsonpath={.data.token}", check=False)
        token = base64.b64decode(out.stdout).decode() if out.returncode == 0 else ""
        if token or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    METRICS_TOKEN.write_text(token)


def operator_installed() -> bool:
    return kubectl("-n", OPERATOR_NAMESPACE, "get", "deployment", OPERATOR_DEPLOYMENT, check=False).returncode == 0


def operator_replicas() -> int:
    """The Helm-installed operator's desired replicas; 0 when it is not installed."""
    out = kubectl("-n", OPERATOR_NAMESPACE, "get", "deployment", OPERATOR_DEPLOYMENT, "-o",
                  "jsonpath={.spec.replicas}", check=False)
    return int(out.stdout or 0) if out.returncode == 0 else 0


def scale_operator(replicas: int, timeout: float = 120) -> None:
    """Scale the Helm-installed operator; 0 hands the cluster to an operator run as a process
    (the integration tests'), so two operators never reconcile the same jobs."""
    if not operator_installed():
        return
    kubectl("-n", OPERATOR_NAMESPACE, "scale", "deployment", OPERATOR_DEPLOYMENT, f"--replicas={replicas}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = json.loads(kubectl("-n", OPERATOR_NAMESPACE, "get", "pods", "-l",
                                  "app.kubernetes.io/name=dpjob-operator", "-o", "json").stdout)["items"]
        ready = [p for p in pods if not p["metadata"].get("deletionTimestamp") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))]
        if (replicas == 0 and not pods) or (replicas > 0 and len(ready) >= replicas):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the operator did not reach {replicas} ready replica(s) in {timeout:.0f}s")


def give_back_operator(replicas: int, timeout: float = 120) -> None:
    """Scale the Helm-installed operator back to ``replicas`` after a test or benchmark run took the
    cluster. If the image its release names is no longer the one built here (a rebuild since, e.g.
    ``make bench-compare``'s cluster-up, replaced it on the node: tags are content hashes), upgrade
    the release to the current image first: scaled up as it was, its pod would sit in
    ImagePullBackOff and the dev cluster would reconcile nothing."""
    if replicas <= 0 or not operator_installed():
        return
    deployed = kubectl("-n", OPERATOR_NAMESPACE, "get", "deployment", OPERATOR_DEPLOYMENT, "-o",
                       "jsonpath={.spec.template.spec.containers[0].image}", check=False).stdout.strip()
    if deployed != node_images("operator")["operator"]:
        install_operator()
    scale_operator(replicas, timeout)


def operator_pod() -> dict | None:
    pods = json.loads(kubectl("-n", OPERATOR_NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=dpjob-operator",
                              "-o", "json").stdout)["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return live[0] if live else None


# ------------------------------------------------------------------------------- Prometheus


@dataclass
class Proc:
    name: str
    pid: int
    log: Path

    def alive(self) -> bool:
        return cluster.alive(self.pid)

    def stop(self, timeout: float = 20.0) -> None:
        if self.alive():
            os.killpg(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.alive():
                os.killpg(self.pid, signal.SIGKILL)
        (PIDS / f"{self.name}.pid").unlink(missing_ok=True)
        (RUN / f"{self.name}.port").unlink(missing_ok=True)


def existing(name: str, port: int | None = None) -> Proc | None:
    """The live process recorded under ``name``; with ``port``, only if it serves that port.

    A Prometheus left by an interrupted run on another port is not what the caller asked for:
    reusing it would send the caller's queries to a port where nothing listens.
    """
    try:
        proc = Proc(name, int((PIDS / f"{name}.pid").read_text()), LOGS / f"{name}.log")
    except (OSError, ValueError):
        return None
    if not proc.alive():
        return None
    if port is not None:
        try:
            recorded = int((RUN / f"{name}.port").read_text())
        except (OSError, ValueError):
            recorded = None
        if recorded != port:
            proc.stop()
            return None
    return proc


def start_prometheus(port: int = 19090, operator_targets: list[str] | None = None, name: str = "prometheus") -> Proc:
    """Prometheus 3 on 127.0.0.1:<port>, discovering pods through the API server."""
    proc = existing(name, port)
    if proc:
        return proc
    wd = STATE / name
    wd.mkdir(parents=True, exist_ok=True)
    for d in (PIDS, LOGS, RUN):
        d.mkdir(parents=True, exist_ok=True)
    cfg = wd / "prometheus.yml"
    write_metrics_token()
    token = METRICS_TOKEN if METRICS_TOKEN.read_text() else None
    cfg.write_text(promsupport.render_cluster_config(KUBECONFIG, operator_targets or [], token_file=token))
    log = LOGS / f"{name}.log"
    with open(log, "ab") as f:
        popen = subprocess.Popen([promsupport.prometheus_binary(), f"--config.file={cfg}",
                                  f"--storage.tsdb.path={wd / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                  "--log.level=warn"], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=REPO, start_new_session=True)
    (PIDS / f"{name}.pid").write_text(str(popen.pid))
    (RUN / f"{name}.port").write_text(str(port))
    proc = Proc(name, popen.pid, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"prometheus exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1).status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"prometheus on port {port} not ready after 60s; see {log}")


def promql(port: int, expr: str, at: float | None = None) -> list:
    return promsupport.query(f"http://127.0.0.1:{port}", expr, at)


# --------------------------------------------------------------------------- jobs on real nodes


def run_on_real_node(job: dict) -> dict:
    """Place a DataParallelJob's ranks on the real node(s), whatever the operator's pools say, as a
    hardened container: non-root, read-only root filesystem, no capabilities. The node's
    ``/tmp/dpjob`` is mounted at the same path (checkpoints outlive pods; tests read reports)."""
    SHARED_DIR.mkdir(parents=True, exist_ok=True)
    SHARED_DIR.chmod(0o1777)  # the trainer runs as uid 10001
    spec = job["spec"]["template"].setdefault("spec", {})
    spec.setdefault("nodeSelector", {})["dpjob.io/pool"] = realnode.POOL
    tolerations = spec.setdefault("tolerations", [])
    if realnode.TOLERATION not in tolerations:
        tolerations.append(dict(realnode.TOLERATION))
    volumes = spec.setdefault("volumes", [])
    if not any(v["name"] == "dpjob-shared" for v in volumes):
        volumes += [{"name": "dpjob-shared", "hostPath": {"path": str(SHARED_DIR), "type": "Directory"}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
    for container in spec.get("containers", []):
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("securityContext", {
            "runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
        mounts = container.setdefault("volumeMounts", [])
        if not any(m["name"] == "dpjob-shared" for m in mounts):
            mounts += [{"name": "tmp", "mountPath": "/tmp"}, {"name": "dpjob-shared", "mountPath": str(SHARED_DIR)}]
    return job


def node_images(*names: str) -> dict[str, str]:
    """Build (or reuse) these images and push them to the dev registry: name -> reference.

    The reference is the image's immutable ``dev-<name>-<key>`` tag: a pod can never run a build
    older than this checkout's, and the kubelet pulls it from the registry on first use."""
    return cluster.built_images(names)


def trainer_image() -> str:
    """The trainer image built from trainer-image/Dockerfile, in the dev registry."""
    return node_images("trainer")["trainer"]


def trainer_mindspore_image() -> str:
    """The MindSpore trainer image (trainer-image/Dockerfile.mindspore), in the dev registry under
    its own reference and the public name examples/mindspore-cpu.yaml uses. Built on first use
    only: it is a few GB that no other test needs."""
    return node_images("trainer-mindspore")["trainer-mindspore"]


def with_trainer_image(job: dict) -> dict:
    for container in job["spec"]["template"]["spec"].get("containers", []):
        if container.get("name") == "trainer":
            container["image"] = trainer_image()
    return job
