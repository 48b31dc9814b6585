#!/usr/bin/env python3
"""``make doctor``: every prerequisite of ``make dev`` and ``make test``, found or missing, with versions.

Nothing is installed or built here; each missing line says which command installs or builds it
(``make dev`` and ``make test`` do all of it themselves on first use). Standard library only.
Exit status 0 when everything the next run needs without a download is present, else 1.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DPJOB_CACHE", Path.home() / ".cache" / "dpjob"))


def run(*argv: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def script_var(script: str, name: str) -> str:
    m = re.search(rf"^{name}=\$\{{{name}:-([^}}]+)\}}", (REPO / "devcluster" / script).read_text(), re.M)
    return m.group(1) if m else "?"


def debian_groups() -> dict[str, list[str]]:
    text = (REPO / "devcluster" / "sysdeps.sh").read_text()
    return {g: pkgs.split() for g, pkgs in re.findall(r'\[(\w+)\]="([^"]+)"', text)}


def dpkg_version(pkg: str) -> str | None:
    out = run("dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", pkg)
    return out.split()[1] if out.startswith("installed ") else None


def cache_summary() -> list[str]:
    """What is built and cached, where, and its size on disk: one line per component."""
    def size(path: Path) -> str:
        out = run("du", "-sh", str(path))
        return out.split()[0] if out else "?"

    lines = []
    for path, what in ((next(iter(sorted(CACHE.glob("k8s-*/bin"))), None), "Kubernetes, etcd, kwok, helm"),
                       (CACHE / "tools", "CoreDNS, Prometheus 3, pause"),
                       (next(iter(sorted(CACHE.glob("venv-*"))), None), "Python environment (torch, kopf, ...)"),
                       (CACHE / "images", "OCI image archives (operator, trainer, pause, CoreDNS)"),
                       (CACHE / "buildah", "buildah's storage and layer cache"),
                       (CACHE / "containerd", "the real node's containerd store (images imported once)"),
                       (Path(run("go", "env", "GOMODCACHE") or "/nonexistent"), "Go module cache"),
                       (Path(run("go", "env", "GOCACHE") or "/nonexistent"), "Go build cache")):
        if path is not None and path.exists():
            lines.append(f"{size(path):>6}  {what}: {path}")
    return lines


def main() -> int:
    rows: list[tuple[bool, str, str, str]] = []  # ok, what, version or state, how to fix

    def add(ok: bool, what: str, detail: str, fix: str = "") -> None:
        rows.append((ok, what, detail, fix))

    go = shutil.which("go")
    add(bool(go), "go", run("go", "version").replace("go version ", "") if go else "missing",
        "install Go >= 1.25 (the toolchain builds the cluster from Go modules)")
    add(True, "python3", sys.version.split()[0])
    add(bool(shutil.which("gcc")), "gcc", run("gcc", "-dumpfullversion") or "missing",
        "apt-get install -y gcc libc6-dev")
    for group, pkgs in debian_groups().items():
        for pkg in pkgs:
            version = dpkg_version(pkg)
            add(bool(version), f"debian:{pkg} ({group})", version or "missing",
                f"make dev/test install it (bash devcluster/sysdeps.sh {group})")

    versions = {v: script_var("build.sh", v) for v in ("K8S_VERSION", "ETCD_VERSION", "KWOK_VERSION", "HELM_VERSION",
                                                       "COREDNS_VERSION", "PROMETHEUS_MODULE_VERSION",
                                                       "PROMETHEUS_OPERATOR_VERSION")}
    key = (f"k8s-{versions['K8S_VERSION']}_etcd-{versions['ETCD_VERSION']}_kwok-{versions['KWOK_VERSION']}"
           f"_helm-{versions['HELM_VERSION']}")
    bin_dir = CACHE / key / "bin"
    for binary in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
                   "kubectl", "kwok", "helm"):
        path = bin_dir / binary
        add(path.exists(), f"built:{binary}", str(path) if path.exists() else "not built",
            "bash devcluster/build.sh (cold: ~25 min on 2 cores)")
    for tool, binary, version in (("coredns", "coredns", versions["COREDNS_VERSION"]),
                                  ("prometheus", "prometheus", versions["PROMETHEUS_MODULE_VERSION"]),
                                  ("prometheus-operator", "operator", versions["PROMETHEUS_OPERATOR_VERSION"])):
        path = CACHE / "tools" / f"{tool}-{version}" / binary
        add(path.exists(), f"built:{tool}", f"{version} {path}" if path.exists() else "not built",
            "bash devcluster/build.sh")

    lock = hashlib.sha256((REPO / "requirements.lock").read_bytes()).hexdigest()[:12]
    venv = CACHE / f"venv-{lock}"
    add((venv / ".complete").exists(), "venv", str(venv) if venv.exists() else "not created",
        "bash devcluster/venv.sh (downloads torch: a few minutes)")

    for image in ("pause", "coredns", "operator", "trainer", "prometheus", "prometheus-config-reloader",
                  "prometheus-operator"):
        archives = [Path(p) for p in glob.glob(str(CACHE / "images" / f"{image}-*.tar"))
                    if re.fullmatch(rf"{re.escape(image)}-[0-9a-f]{{12}}\.tar", Path(p).name)
                    and Path(p + ".complete").exists()]
        detail = ", ".join(f"{a.name} ({a.stat().st_size / 2**20:.0f} MiB)" for a in archives) or "not built"
        add(bool(archives), f"image:{image}", detail, "bash devcluster/images.sh " + image)

    cgroup = "v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() and \
        Path("/sys/fs/cgroup/cgroup.controllers").read_text().strip() else "v1"
    add(True, "kernel", f"{os.uname().release}, cgroup {cgroup}")
    bridge_nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    add(bridge_nf.exists(), "kernel:br_netfilter", "on" if bridge_nf.exists() else "missing",
        "modprobe br_netfilter (Services between pods on the node's bridge need it)")
    add(os.geteuid() == 0, "root", "yes" if os.geteuid() == 0 else "no",
        "the real node (kubelet, containerd) needs root; DPJOB_REAL_NODES=0 runs kwok pools only")
    CACHE.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(CACHE).free / 2**30
    add(free > 25, "disk free", f"{free:.0f} GiB under {CACHE}", "the first run needs about 25 GiB")

    width = max(len(r[1]) for r in rows)
    for ok, what, detail, fix in rows:
        print(f"{'ok  ' if ok else 'MISS'} {what:<{width}}  {detail}" + ("" if ok or not fix else f"  -> {fix}"))
    missing = [r for r in rows if not r[0]]
    print(f"\n{len(rows) - len(missing)}/{len(rows)} present" +
          ("; make dev and make test install or build the rest on first use" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
