"""The monitoring stack users run, on the dev cluster's real node: the Prometheus Operator (the core
of kube-prometheus-stack) reconciling ServiceMonitors and PodMonitors into a Prometheus that runs
as the operator's own StatefulSet.

Everything comes from the Prometheus Operator's Go module, built by devcluster/build.sh: the
binaries, the CRDs and the upstream RBAC and Deployment manifests (``example/rbac``). Only the
images are swapped for single-binary images built here (devcluster/images.sh), and the pods are
placed on the real node. The Prometheus selects monitors labelled ``release: dpjob-dev``, as
kube-prometheus-stack selects ``release: <its release>``: a chart's monitors are scraped exactly
when their ``additionalLabels`` carry that label.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import realnode, stack  # noqa: E402
from devcluster.kube import kubectl  # noqa: E402
from devcluster.waits import wait_until  # noqa: E402

NAMESPACE = "monitoring"
PROMETHEUS = "dpjob-dev"
RELEASE_LABEL = {"release": "dpjob-dev"}
IMAGES = ("prometheus", "prometheus-config-reloader", "prometheus-operator")


def _bin_dir() -> Path:
    out = subprocess.run(["bash", str(REPO / "devcluster" / "build.sh")], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError("devcluster/build.sh failed: it prints the failing step and its log above")
    return Path(out.stdout.strip().splitlines()[-1])


def _upstream_dir() -> Path:
    """tools/prometheus-operator-<version>/ (binaries, crds/, rbac/), found through the bin link."""
    return (_bin_dir() / "prometheus-operator").resolve().parent


def _load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _on_real_node(pod_spec: dict) -> None:
    pod_spec["nodeSelector"] = {"dpjob.io/pool": realnode.POOL}
    pod_spec["tolerations"] = [dict(realnode.TOLERATION)]


def operator_manifests(upstream: Path, images: dict[str, str]) -> list[dict]:
    """Upstream's Prometheus Operator RBAC and Deployment, in our namespace, with our images."""
    docs: list[dict] = []
    for path in sorted((upstream / "rbac" / "prometheus-operator").glob("*.yaml")):
        for doc in _load(path):
            if doc["kind"] == "ServiceMonitor":  # needs a Prometheus that selects it; not ours
                continue
            if doc["metadata"].get("namespace"):
                doc["metadata"]["namespace"] = NAMESPACE
            for subject in doc.get("subjects", []):
                subject["namespace"] = NAMESPACE
            if doc["kind"] == "Deployment":
                pod = doc["spec"]["template"]["spec"]
                _on_real_node(pod)
                container = pod["containers"][0]
                container["image"] = images["prometheus-operator"]
                container["imagePullPolicy"] = "IfNotPresent"
                reloader = "--prometheus-config-reloader="
                container["args"] = [a for a in container["args"] if not a.startswith(reloader)] \
                    + [f"{reloader}{images['prometheus-config-reloader']}"]
            docs.append(doc)
    return docs


def prometheus_manifests(upstream: Path, image: str, version: str) -> list[dict]:
    """Upstream's Prometheus ServiceAccount and RBAC, and a Prometheus selecting our release label."""
    docs = []
    for path in sorted((upstream / "rbac" / "prometheus").glob("prometheus-*.yaml")):
        for doc in _load(path):
            if doc["kind"] == "Prometheus":
                continue
            if doc["kind"] in ("ServiceAccount",):
                doc["metadata"]["namespace"] = NAMESPACE
            for subject in doc.get("subjects", []):
                subject["namespace"] = NAMESPACE
            docs.append(doc)
    spec: dict = {
        "image": image, "version": version, "replicas": 1, "serviceAccountName": "prometheus",
        "serviceMonitorSelector": {"matchLabels": RELEASE_LABEL},
        "podMonitorSelector": {"matchLabels": RELEASE_LABEL},
        "serviceMonitorNamespaceSelector": {}, "podMonitorNamespaceSelector": {},
        "scrapeInterval": "2s", "evaluationInterval": "2s",
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
    }
    _on_real_node(spec)
    docs.append({"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
                 "metadata": {"name": PROMETHEUS, "namespace": NAMESPACE}, "spec": spec})
    return docs


def _apply(docs: list[dict]) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))



def install() -> str:
    """Install (or update) the stack; returns Prometheus' URL (its pod IP, reachable from the host)."""
    upstream = _upstream_dir()
    images = stack.node_images(*IMAGES)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(upstream / "crds"))
    for crd in ("prometheuses", "servicemonitors", "podmonitors"):
        # A poll, not `kubectl wait`: that errors out when it reads the CRD a moment too early.
        wait_until(lambda crd=crd: kubectl(
            "get", "crd", f"{crd}.monitoring.coreos.com", "-o",
            "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False).stdout == "True",
            60, 1, what=f"CRD {crd}.monitoring.coreos.com Established")
    _apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    _apply(operator_manifests(upstream, images))
    out = kubectl("-n", NAMESPACE, "rollout", "status", "deployment/prometheus-operator", "--timeout=120s",
                          check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the Prometheus Operator did not start: {out.stderr.strip()}")
    version = "v" + images["prometheus"].rsplit(":", 1)[1].rsplit("-", 1)[0].replace("0.3", "3.", 1)
    _apply(prometheus_manifests(upstream, images["prometheus"], version))

    def ready() -> bool:
        out = kubectl("-n", NAMESPACE, "get", "statefulset", f"prometheus-{PROMETHEUS}",
                              "-o", "jsonpath={.status.readyReplicas}", check=False)
        return out.returncode == 0 and out.stdout == "1"

    wait_until(ready, 180, 1, what="the operator's Prometheus StatefulSet")
    ip = kubectl("-n", NAMESPACE, "get", "pod", f"prometheus-{PROMETHEUS}-0",
                         "-o", "jsonpath={.status.podIP}").stdout
    return f"http://{ip}:9090"
