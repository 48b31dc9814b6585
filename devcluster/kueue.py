"""Kueue in the dev cluster, as a platform team runs it: Kueue v0.17's controller built from its Go
module (devcluster/build-kueue.sh), a single-binary image built here and pulled from the dev
registry, installed from the module's own Helm chart (``charts/kueue``) on the real node.

What differs from the chart's defaults, and why:
- ``integrations.externalFrameworks`` lists DataParallelJob: Kueue then leaves the rank pods to
  their owner, and dpjob's operator is the integration (it creates and drives the Workloads).
- ``managedJobsNamespaceSelector`` is ``dpjob.io/kueue=managed``: Kueue's webhooks on pods and
  batch Jobs see only namespaces that opt in, so the rest of the cluster (and every other test)
  never waits on Kueue's webhook.
- The on-demand visibility API is off (its APIService is not installed): an aggregated API whose
  server is down makes discovery fail for every client (``helm`` refuses to install anything).
- The controller requests 100m CPU, not 500m: the dev node has two cores for everything.

``python devcluster/kueue.py install|uninstall|status`` (``make kueue`` installs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import addon, realnode  # noqa: E402
from devcluster.kube import kubectl  # noqa: E402
from devcluster.state import BIN  # noqa: E402
from devcluster.waits import TimedOut, wait_until  # noqa: E402
from devcluster.workloads import node_images  # noqa: E402

NAMESPACE = "kueue-system"
RELEASE = "kueue"
MANAGED_NAMESPACE_LABEL = {"dpjob.io/kueue": "managed"}
EXTERNAL_FRAMEWORK = "DataParallelJob.v1alpha1.dpjob.io"
DROPPED_KINDS = ("APIService",)


def tool_dir() -> Path:
    """tools/kueue-<version>/ (``manager`` and ``chart/``), built on first use."""
    out = subprocess.run(["bash", str(REPO / "devcluster" / "build-kueue.sh")], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit("kueue: devcluster/build-kueue.sh failed (the lines above say why)")
    return Path(out.stdout.strip().splitlines()[-1])


def manager_config() -> dict:
    """Kueue's Configuration: the chart's own settings plus the three above."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"}, "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "clientConnection": {"qps": 50, "burst": 100},
        "managedJobsNamespaceSelector": {"matchLabels": dict(MANAGED_NAMESPACE_LABEL)},
        "integrations": {"frameworks": ["batch/job"], "externalFrameworks": [EXTERNAL_FRAMEWORK]},
    }


def chart_values(image: str) -> dict:
    repository, tag = image.rsplit(":", 1)
    return {
        "controllerManager": {
            "featureGates": [{"name": "VisibilityOnDemand", "enabled": False}],
            "manager": {"image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                      "limits": {"cpu": "1", "memory": "512Mi"}}},
            "nodeSelector": {"dpjob.io/pool": realnode.POOL},
            "tolerations": [dict(realnode.TOLERATION)],
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(), sort_keys=False)},
    }


def manifests(chart: Path, image: str, work: Path) -> list[dict]:
    """``helm template`` of the module's chart with our values, less the dropped kinds."""
    values = work / "kueue-values.json"
    values.write_text(json.dumps(chart_values(image)))
    out = subprocess.run([str(BIN / "helm"), "template", RELEASE, str(chart), "-n", NAMESPACE, "-f", str(values)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"kueue: helm template failed: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") not in DROPPED_KINDS]


def _apply(docs: list[dict]) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))


def _webhook_answers() -> bool:
    """A server-side dry run of a ResourceFlavor passes Kueue's mutating and validating webhooks:
    true once the controller serves them with the certificate it wrote for itself."""
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "probe"}}
    return kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(flavor), check=False).returncode == 0


def install(work: Path | None = None, timeout: float = 240) -> str:
    """Install (or update) Kueue; returns its image. Waits until its webhooks answer."""
    tool = tool_dir()
    image = node_images("kueue")["kueue"]
    work = work or (REPO / ".devcluster" / "run")
    work.mkdir(parents=True, exist_ok=True)
    docs = manifests(tool / "chart", image, work)
    _apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    _apply(crds)
    for crd in crds:
        name = crd["metadata"]["name"]
        wait_until(lambda name=name: kubectl(
            "get", "crd", name, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}",
            check=False).stdout == "True", 60, 1, what=f"CRD {name} Established")
    _apply([d for d in docs if d["kind"] != "CustomResourceDefinition"])
    rollout = kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{RELEASE}-controller-manager",
                      f"--timeout={int(timeout)}s", check=False, timeout=timeout + 30)
    if rollout.returncode != 0:
        raise SystemExit(f"kueue: the controller did not become ready: {rollout.stderr.strip()}\n{diagnosis()}")
    try:
        wait_until(_webhook_answers, 120, 1, what="Kueue's webhooks to answer")
    except TimedOut:
        raise SystemExit(f"kueue: its webhooks never answered\n{diagnosis()}") from None
    return image


def uninstall(work: Path | None = None, timeout: float = 120) -> None:
    """Delete what ``install`` applied and wait until its CRDs are gone (a later install would
    otherwise meet them terminating). Webhooks first (nothing calls a server that is gone), then the
    controller; the finalizers Kueue's objects still carry are dropped, since no controller is left
    to drop them, and the CRDs go last, their objects with them."""
    work = work or (REPO / ".devcluster" / "run")
    work.mkdir(parents=True, exist_ok=True)
    docs = manifests(tool_dir() / "chart", "kueue:unused", work)
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    webhooks = [d for d in docs if "Webhook" in d["kind"]]
    rest = [d for d in docs if d not in crds and d not in webhooks]
    for chosen in (webhooks, rest):
        kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": chosen}), check=False)
    for crd in crds:
        _drop_finalizers(crd["spec"]["names"]["plural"] + "." + crd["spec"]["group"])
    kubectl("delete", "--ignore-not-found", f"--timeout={int(timeout)}s", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}), check=False, timeout=timeout + 30)


def _drop_finalizers(resource: str) -> None:
    out = kubectl("get", resource, "-A", "-o", "json", check=False)
    if out.returncode != 0:
        return
    for item in json.loads(out.stdout).get("items", []):
        meta = item["metadata"]
        if meta.get("finalizers"):
            where = ["-n", meta["namespace"]] if meta.get("namespace") else []
            kubectl("patch", resource, meta["name"], *where, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                    check=False)


def installed() -> bool:
    out = kubectl("-n", NAMESPACE, "get", "deployment", f"{RELEASE}-controller-manager",
                  "-o", "jsonpath={.status.readyReplicas}", check=False)
    return out.returncode == 0 and out.stdout == "1" and _webhook_answers()


def diagnosis() -> str:
    pods = kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide", check=False).stdout
    logs = kubectl("-n", NAMESPACE, "logs", f"deployment/{RELEASE}-controller-manager", "--tail=30",
                   check=False).stdout
    return f"{pods}\n{logs}"


def main() -> int:
    return addon.main("kueue", __doc__.splitlines()[0], install, uninstall, installed)


if __name__ == "__main__":
    raise SystemExit(main())
