"""The operator on the dev cluster as a user runs it: the chart installed with Helm from the dev
registry, its pod running the image built from this checkout; scaling it down while a test runs
its own operator as a process, and back up afterwards.

Used through devcluster/stack.py by ``make dev``, the tests and the benchmarks. The operator is a
Deployment, so the cluster owns it: ``make cluster-down`` needs no pid file for it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time

from devcluster import publish, realnode, registry
from devcluster.kube import kubectl
from devcluster.state import KUBECONFIG, RUN, STATE
from devcluster.workloads import node_images

# One install command everywhere (README, docs/install.md, make dev, the tests):
#   helm install dpjob oci://<registry>/charts/dpjob-operator --version <version> -n dpjob-system
RELEASE, OPERATOR_NAMESPACE = "dpjob", "dpjob-system"
OPERATOR_DEPLOYMENT = "dpjob-dpjob-operator"  # the chart's fullname for this release name
# The chart's scraper identity (metrics.reader): its token lets a Prometheus on this machine read
# the operator pod's /metrics, which answers only tokens the API server authorizes.
METRICS_TOKEN = RUN / "operator-metrics-token"
METRICS_READER_SECRET = f"{OPERATOR_DEPLOYMENT}-metrics-reader-token"


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
