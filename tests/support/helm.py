"""Helpers for the Helm chart tests: the helm binary, rendering, and acting as the chart's
ServiceAccount (a kubeconfig holding a TokenRequest token for it).

``service_account_kubeconfig`` is what a test uses to run the operator process *with the chart's
RBAC*: point ``KUBECONFIG`` at the returned file and every request is authorized as
``system:serviceaccount:<ns>:<sa>``.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster import kubectl
from tests.support.paths import DEVCLUSTER, KUBECONFIG, REPO

CHART = REPO / "helm" / "dpjob-operator"
CRD = REPO / "crds" / "dataparalleljob.yaml"
# The version the rendered manifests are checked against (the dev cluster's).
KUBE_VERSION = "1.36.0"


def helm_binary() -> str | None:
    """The helm to use: $DPJOB_HELM, the cluster's .devcluster/bin/helm, the build cache, or the one
    devcluster/build.sh builds now (so a test never skips for want of helm)."""
    candidates = [os.environ.get("DPJOB_HELM"), str(DEVCLUSTER / "bin" / "helm"),
                  *sorted(glob.glob(os.path.expanduser("~/.cache/dpjob/*/bin/helm")), reverse=True),
                  shutil.which("helm")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    out = subprocess.run(["bash", str(REPO / "devcluster" / "build.sh")], stdout=subprocess.PIPE, text=True)
    built = Path(out.stdout.strip().splitlines()[-1]) / "helm" if out.returncode == 0 and out.stdout.strip() else None
    return str(built) if built and built.exists() else None


def helm(*args: str, check: bool = True, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = helm_binary()
    if binary is None:
        raise FileNotFoundError("no helm binary (set DPJOB_HELM or run devcluster/build.sh)")
    cmd = [binary, *args]
    if kubeconfig is not None:
        cmd += ["--kubeconfig", str(kubeconfig)]
    env = dict(os.environ)
    # Keep helm's caches and config out of $HOME (and out of each other's way).
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
        env.setdefault(var, os.path.join(tempfile.gettempdir(), "dpjob-helm", sub))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _set_args(values: Mapping[str, Any] | None, set_: Iterable[str]) -> list[str]:
    args: list[str] = []
    for s in set_:
        args += ["--set", s]
    if values:
        # --set-json per top-level key keeps types (lists, maps, null) exactly as given.
        for key, value in values.items():
            args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def template(release: str = "dpjob", namespace: str = "dpjob-system", *, values: Mapping[str, Any] | None = None,
             set_: Iterable[str] = (), extra: Iterable[str] = (),
             check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm template`` the chart (no cluster needed)."""
    extra = list(extra)
    if not any(a.startswith("--kube-version") or a == "--validate" for a in extra):
        extra += ["--kube-version", KUBE_VERSION]
    return helm("template", release, str(CHART), "--namespace", namespace, *_set_args(values, set_), *extra,
                check=check)


def render(release: str = "dpjob", namespace: str = "dpjob-system", *, values: Mapping[str, Any] | None = None,
           set_: Iterable[str] = (), include_crds: bool = False, extra: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The rendered manifests as parsed objects (empty documents dropped)."""
    extra = [*extra, "--include-crds"] if include_crds else list(extra)
    out = template(release, namespace, values=values, set_=set_, extra=extra).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def umbrella_chart(directory: Path, name: str = "platform") -> Path:
    """An umbrella chart in ``directory`` whose one dependency is this chart (``file://``), fetched
    with ``helm dependency update``: how a platform team ships the operator inside its own release.
    Its values for the operator go under the key ``dpjob-operator``."""
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    root = directory / name
    (root / "templates").mkdir(parents=True)
    chart = {"apiVersion": "v2", "name": name, "version": "1.0.0", "type": "application",
             "dependencies": [{"name": "dpjob-operator", "version": version, "repository": f"file://{CHART}"}]}
    (root / "Chart.yaml").write_text(yaml.safe_dump(chart, sort_keys=False))
    helm("dependency", "update", str(root))
    return root


def by_kind(objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def release_name() -> str:
    """A fresh release name: cluster-scoped objects (ClusterRole/Binding) are named after the release,
    so each test needs its own."""
    return f"dpj-{uuid.uuid4().hex[:6]}"


def fullname(release: str) -> str:
    """The chart's fullname for ``release``: the name of its ServiceAccount, Deployment and RBAC."""
    return f"{release}-dpjob-operator"


class Installed:
    """`helm install` on enter, `helm uninstall` on exit (Helm removes the cluster-scoped RBAC; the
    namespace fixture removes the rest).

    The release renders no CRD (``crds.install=false``): the test cluster's CRD is applied from
    crds/ by the ``crds`` fixture and shared by every test, so no short-lived release may own it."""

    def __init__(self, cluster: Path, namespace: str, *set_json: str) -> None:
        self.cluster, self.namespace, self.release = cluster, namespace, release_name()
        self.set_json = list(set_json)
        self.notes = ""

    def __enter__(self) -> Installed:
        args = ["install", self.release, str(CHART), "--namespace", self.namespace, "--timeout", "60s",
                "--set", "crds.install=false"]
        for s in self.set_json:
            args += ["--set-json", s]
        self.notes = helm(*args, kubeconfig=self.cluster).stdout
        return self

    def __exit__(self, *exc: object) -> None:
        helm("uninstall", self.release, "--namespace", self.namespace, "--wait", "--timeout", "60s",
             kubeconfig=self.cluster, check=False)


def service_account_kubeconfig(namespace: str, sa_name: str, path: str | Path, *, duration: str = "1h",
                               base_kubeconfig: Path = KUBECONFIG) -> Path:
    """Write a kubeconfig that authenticates as ServiceAccount ``namespace/sa_name``; returns its path.

    The token comes from the TokenRequest API (``kubectl create token``), the server and CA from
    ``base_kubeconfig`` (the admin kubeconfig of the local cluster). Nothing else of the admin
    identity is copied, so every request made with it is authorized by the SA's RBAC alone.
    """
    token = kubectl("create", "token", sa_name, "-n", namespace, f"--duration={duration}").stdout.strip()
    if not token:
        raise AssertionError(f"empty token for {namespace}/{sa_name}")
    return write_token_kubeconfig(base_kubeconfig, token, namespace, sa_name, path)


def write_token_kubeconfig(base_kubeconfig: str | Path, token: str, namespace: str, sa_name: str,
                           path: str | Path) -> Path:
    """A self-contained kubeconfig: ``base_kubeconfig``'s current server and CA (inlined), ``token``."""
    base = yaml.safe_load(Path(base_kubeconfig).read_text())
    contexts = {c["name"]: c["context"] for c in base.get("contexts") or []}
    current = contexts.get(base.get("current-context")) or next(iter(contexts.values()))
    clusters = {c["name"]: c["cluster"] for c in base["clusters"]}
    src = clusters[current["cluster"]]
    cluster: dict[str, Any] = {"server": src["server"]}
    if src.get("certificate-authority-data"):
        cluster["certificate-authority-data"] = src["certificate-authority-data"]
    elif src.get("certificate-authority"):
        ca = Path(src["certificate-authority"])
        if not ca.is_absolute():
            ca = Path(base_kubeconfig).parent / ca
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    elif src.get("insecure-skip-tls-verify"):
        cluster["insecure-skip-tls-verify"] = True
    user = f"system:serviceaccount:{namespace}:{sa_name}"
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "dpjob", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": sa_name, "context": {"cluster": "dpjob", "user": user, "namespace": namespace}}],
        "current-context": sa_name,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def kubectl_as(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """kubectl with another kubeconfig (e.g. the ServiceAccount's)."""
    return subprocess.run([str(DEVCLUSTER / "bin" / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, check=check)


def can_i(kubeconfig: Path, verb: str, resource: str, namespace: str | None = None,
          subresource: str | None = None) -> bool:
    """``kubectl auth can-i`` evaluated for the identity in ``kubeconfig`` (yes -> True, no -> False).

    ``namespace`` None asks about all namespaces (what a cluster-wide list/watch needs); cluster-scoped
    resources (nodes) ignore it.
    """
    args = ["auth", "can-i", verb, resource]
    if subresource:
        args.append(f"--subresource={subresource}")
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    proc = kubectl_as(kubeconfig, *args, check=False)
    answer = proc.stdout.strip()
    if answer not in ("yes", "no"):
        raise AssertionError(f"kubectl auth can-i {verb} {resource}: rc={proc.returncode} {proc.stdout} {proc.stderr}")
    return answer == "yes"
