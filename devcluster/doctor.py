#!/usr/bin/env python3
"""``make doctor``: every prerequisite of ``make dev`` and ``make test``, found or missing, with versions.

Two kinds of line. What the machine must bring (README, "Prerequisites"): Debian or Ubuntu on
x86-64, root, 2 cores, about 40 GiB of free disk, the package registries reachable; a MISS there
is for the user to fix. Everything else (Debian packages, Go, the binaries built from Go modules,
the Python environment, the images) ``make dev`` and ``make test`` install or build themselves on
first use; a MISS there says which command does it. Nothing is installed or built here. Standard
library only. Exit status 0 when everything the next run needs without a download is present.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
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
                       (CACHE / "registry", "the dev cluster's OCI registry (images and the chart)"),
                       (CACHE / "buildah", "buildah's storage and layer cache"),
                       (CACHE / "containerd", "the real nodes' containerd store (images pulled once per machine)"),
                       (Path(run("go", "env", "GOMODCACHE") or "/nonexistent"), "Go module cache"),
                       (Path(run("go", "env", "GOCACHE") or "/nonexistent"), "Go build cache")):
        if path is not None and path.exists():
            lines.append(f"{size(path):>6}  {what}: {path}")
    return lines


Add = Callable[..., None]
GO_TOOLCHAIN = "go1.27.3"  # devcluster/go.sh's DPJOB_GO_TOOLCHAIN default


def os_release() -> dict[str, str]:
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return {}
    return {k: v.strip('"') for k, _, v in (line.partition("=") for line in lines) if k}


def reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=8):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False


def package_sources() -> dict[str, str]:
    """The first URL of each registry this project downloads from, as this machine is set up."""
    pip = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True,
                         text=True, timeout=20)
    pip_index = pip.stdout.strip() if pip.returncode == 0 and pip.stdout.strip() else \
        run(sys.executable, "-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)")
    goproxy = run("go", "env", "GOPROXY").split(",")[0] if shutil.which("go") else ""
    apt = ""
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        found = re.search(r"(?:^deb\s+(?:\[[^]]*\]\s+)?|^URIs:\s*)(https?://\S+)", path.read_text() if path.is_file()
                          else "", re.M)
        if found:
            apt = found.group(1)
            break
    return {"PyPI (pip index)": pip_index, "Go module proxy": goproxy, "Debian packages (apt)": apt}


def machine(add: Add) -> None:
    """What the user's machine must bring: make dev cannot install these."""
    osr = os_release()
    add(osr.get("ID") in ("debian", "ubuntu") or "debian" in osr.get("ID_LIKE", ""), "os",
        osr.get("PRETTY_NAME", "unknown"), "Debian 12 or Ubuntu 22.04+ (apt-get installs the node's packages)")
    add(os.uname().machine == "x86_64", "arch", os.uname().machine, "x86-64 (the images and torch wheels are x86-64)")
    add(os.geteuid() == 0, "root", "yes" if os.geteuid() == 0 else "no",
        "run as root: the real node (kubelet, containerd) needs it; DPJOB_REAL_NODES=0 runs kwok pools only")
    cores = os.cpu_count() or 0
    add(cores >= 2, "cores", str(cores), "2 cores or more")
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    add(mem >= 15, "memory", f"{mem:.0f} GiB", "16 GiB or more")
    CACHE.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(CACHE).free / 2**30
    add(free > 40 or (CACHE / "registry").exists(), "disk free", f"{free:.0f} GiB under {CACHE}",
        "the first run needs about 40 GiB (Go caches, the images, the registry, the venv)")
    for what, url in package_sources().items():
        if what == "Go module proxy" and not url:
            continue  # no Go yet: devcluster/go.sh reaches the proxy through Debian's golang-go
        add(bool(url) and reachable(url), f"network:{what}", url or "no source configured",
            "the first run downloads from it: check the proxy or mirror settings")


def go_toolchain(add: Add) -> None:
    go = shutil.which("go")
    version = run("go", "env", "GOVERSION") if go else ""
    cached = CACHE / "go" / GO_TOOLCHAIN / "bin" / "go"
    minor = int(m.group(1)) if (m := re.match(r"go1\.(\d+)", version)) else 0
    if minor >= 25:
        add(True, "go", f"{version} {go}")
    else:
        add(cached.exists(), "go", f"{GO_TOOLCHAIN} {cached}" if cached.exists() else (version or "missing"),
            f"make dev installs it (bash devcluster/go.sh: Debian's golang-go fetches {GO_TOOLCHAIN})")


def buildah_images() -> set[str]:
    out = run("buildah", "--root", str(CACHE / "buildah" / "storage"), "--runroot", str(CACHE / "buildah" / "run"),
              "--storage-driver", "overlay", "images", "--format", "{{.Name}}")
    return {line.strip() for line in out.splitlines()}


def system_packages(add: Add) -> None:
    """python3, gcc and the Debian packages devcluster/sysdeps.sh installs."""
    add(True, "python3", sys.version.split()[0])
    add(bool(shutil.which("gcc")), "gcc", run("gcc", "-dumpfullversion") or "missing",
        "apt-get install -y gcc libc6-dev")
    for group, pkgs in debian_groups().items():
        if group == "go":  # only when the machine has no Go at all: the "go" line above covers it
            continue
        for pkg in pkgs:
            version = dpkg_version(pkg)
            add(bool(version), f"debian:{pkg} ({group})", version or "missing",
                f"make dev/test install it (bash devcluster/sysdeps.sh {group})")


def built_binaries(add: Add) -> None:
    """The binaries devcluster/build.sh builds from Go modules, at the versions it names."""
    versions = {v: script_var("build.sh", v) for v in ("K8S_VERSION", "ETCD_VERSION", "KWOK_VERSION", "HELM_VERSION",
                                                       "COREDNS_VERSION", "PROMETHEUS_MODULE_VERSION",
                                                       "PROMETHEUS_OPERATOR_VERSION", "REGISTRY_VERSION")}
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
                                  ("prometheus-operator", "operator", versions["PROMETHEUS_OPERATOR_VERSION"]),
                                  ("registry", "registry", versions["REGISTRY_VERSION"])):
        path = CACHE / "tools" / f"{tool}-{version}" / binary
        add(path.exists(), f"built:{tool}", f"{version} {path}" if path.exists() else "not built",
            "bash devcluster/build.sh")


def environment_and_images(add: Add) -> None:
    """The Python environment of requirements.lock and the images devcluster/images.sh builds."""
    lock = hashlib.sha256((REPO / "requirements.lock").read_bytes()).hexdigest()[:12]
    venv = CACHE / f"venv-{lock}"
    add((venv / ".complete").exists(), "venv", str(venv) if venv.exists() else "not created",
        "bash devcluster/venv.sh (downloads torch: a few minutes)")
    built = buildah_images()
    for image in ("pause", "coredns", "operator", "trainer", "prometheus", "prometheus-config-reloader",
                  "prometheus-operator"):
        add(f"localhost/dpjob/{image}" in built, f"image:{image}", "built" if f"localhost/dpjob/{image}" in built
            else "not built", "bash devcluster/images.sh " + image)


def kernel(add: Add) -> None:
    cgroup = "v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() and \
        Path("/sys/fs/cgroup/cgroup.controllers").read_text().strip() else "v1"
    add(True, "kernel", f"{os.uname().release}, cgroup {cgroup}")
    bridge_nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    add(bridge_nf.exists(), "kernel:br_netfilter", "on" if bridge_nf.exists() else "missing",
        "modprobe br_netfilter (Services between pods on the node's bridge need it)")


def main() -> int:
    rows: list[tuple[bool, str, str, str]] = []  # ok, what, version or state, how to fix

    def add(ok: bool, what: str, detail: str, fix: str = "") -> None:
        rows.append((ok, what, detail, fix))

    for check in (machine, go_toolchain, system_packages, built_binaries, environment_and_images, kernel):
        check(add)

    width = max(len(r[1]) for r in rows)
    for ok, what, detail, fix in rows:
        print(f"{'ok  ' if ok else 'MISS'} {what:<{width}}  {detail}" + ("" if ok or not fix else f"  -> {fix}"))
    missing = [r for r in rows if not r[0]]
    print(f"\n{len(rows) - len(missing)}/{len(rows)} present" +
          ("; make dev and make test install or build the rest on first use" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
