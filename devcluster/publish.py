#!/usr/bin/env python3
"""Push dpjob's images and chart to an OCI registry: ``make push``, ``make release`` and the dev
cluster's own registry (devcluster/registry.py).

    publish.py push    [--registry R] [--dev] NAME...   images built by devcluster/images.sh
    publish.py chart   [--registry R] --helm HELM       helm package + helm push (oci://R/charts)
    publish.py release --version V --registry R --helm HELM

One version, from one source: pyproject.toml's ``[project] version``. The chart's version and
appVersion equal it (a unit test holds them together), and it is the images' release tag, so
``helm install oci://R/charts/dpjob-operator --version V`` runs ``R/dpjob-operator:V``.

What each image is published as (``IMAGES``): one build may carry several names. PyPI's Linux
torch wheel carries CUDA, so the trainer image is both ``trainer:cpu`` and ``trainer:cuda``. With
``--dev`` an image also gets an immutable tag ``dev-<name>-<hash of its inputs>``, which the tests
and ``make dev`` use so that a pod can never run a stale build, and the dev tags a new build
supersedes are deleted from the registry (their blobs are freed at the next ``make cluster-up``).

Pushes to a loopback registry are uncompressed (nothing to gain from gzip on this machine, and
minutes of CPU to lose on a multi-GB layer); pushes elsewhere are gzip-compressed, as registries
expect. Standard library only; prints ``NAME REF`` per image (REF: what to run) on stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import registry  # noqa: E402

CACHE = registry.CACHE
BUILDAH = ["buildah", "--root", str(CACHE / "buildah" / "storage"), "--runroot", str(CACHE / "buildah" / "run"),
           "--storage-driver", "overlay"]
CHART = REPO / "helm" / "dpjob-operator"
PRODUCT_IMAGES = ("operator", "trainer", "trainer-mindspore")


@dataclass(frozen=True)
class Publication:
    """Where one built image goes under a registry prefix: a repository and its tags."""

    repository: str
    tags: tuple[str, ...]


def source_version(pyproject: Path = REPO / "pyproject.toml") -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.MULTILINE)
    if not match:
        raise SystemExit(f"publish: no version in {pyproject}")
    return match.group(1)


def publication(name: str, version: str, local_tag: str) -> Publication:
    """The repository and tags of image ``name`` (its local build tag names the dev-only images)."""
    table = {
        "operator": Publication("dpjob-operator", (version,)),
        "trainer": Publication("trainer", (version, "cpu", "cuda")),
        "trainer-mindspore": Publication("trainer", (f"{version}-mindspore-cpu", "mindspore-cpu")),
    }
    return table.get(name, Publication(name, (local_tag,)))


def dev_tag(name: str, local_ref: str) -> str:
    """``dev-<name>-<key>`` for an image built from this checkout (``localhost/dpjob/NAME:dev-KEY``);
    the dev-only images (pause, CoreDNS, Prometheus) keep their version tag."""
    tag = local_ref.rsplit(":", 1)[1]
    return f"dev-{name}-{tag[4:]}" if tag.startswith("dev-") else tag


def build(names: list[str]) -> dict[str, str]:
    """Build (or reuse) the images: name -> local buildah reference."""
    out = subprocess.run(["bash", str(REPO / "devcluster" / "images.sh"), *names], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit("publish: building the images failed (the lines above say which step and why)")
    refs = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            refs[parts[0]] = parts[1]
    return refs


def push(local_ref: str, dest: str) -> str:
    """``buildah push`` one tag; returns the manifest digest the registry now serves for it."""
    host = dest.split("/", 1)[0]
    local = host.split(":")[0] in ("localhost", "127.0.0.1")
    with tempfile.NamedTemporaryFile("r", suffix=".digest") as digest:
        argv = [*BUILDAH, "push", "--quiet", "--digestfile", digest.name,
                *(["--tls-verify=false", "--disable-compression"] if local else []),
                local_ref, f"docker://{dest}"]
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"publish: buildah push {dest} failed: {out.stderr.strip()[-800:]}")
        return digest.read().strip()


def prune_dev_tags(prefix: str, repository: str, name: str, keep: str) -> list[str]:
    """Delete the superseded ``dev-<name>-*`` manifests of ``repository`` (the one ``keep`` names
    stays), unless a release tag still points at the same manifest."""
    host, _, path = f"{prefix}/{repository}".partition("/")
    pattern = re.compile(rf"^dev-{re.escape(name)}-[0-9a-f]{{12}}$")
    all_tags = registry.tags(host, path)
    digests = {t: registry.manifest_digest(f"{host}/{path}:{t}") for t in all_tags}
    keep_digests = {digests[t] for t in all_tags if t == keep or not t.startswith("dev-")}
    deleted = []
    for tag in all_tags:
        digest = digests[tag]
        if pattern.match(tag) and tag != keep and digest and digest not in keep_digests:
            registry.delete_manifest(host, path, digest)
            deleted.append(tag)
    return deleted


def push_images(prefix: str, names: list[str], version: str, dev: bool) -> dict[str, tuple[str, dict[str, str]]]:
    """Push each image under ``prefix``: name -> (the reference to run, {ref: digest} of every tag)."""
    result = {}
    for name, local_ref in build(names).items():
        t0 = time.monotonic()
        pub = publication(name, version, local_ref.rsplit(":", 1)[1])
        tags = ((dev_tag(name, local_ref),) if dev else ()) + pub.tags
        digests = {f"{prefix}/{pub.repository}:{tag}": push(local_ref, f"{prefix}/{pub.repository}:{tag}")
                   for tag in dict.fromkeys(tags)}
        if dev and dev_tag(name, local_ref) != pub.tags[0]:
            prune_dev_tags(prefix, pub.repository, name, dev_tag(name, local_ref))
        run_ref = next(iter(digests))
        print(f"[publish] {name}: {', '.join(digests)} ({time.monotonic() - t0:.0f}s)", file=sys.stderr)
        result[name] = (run_ref, digests)
    return result


def helm_plain_http(prefix: str) -> list[str]:
    return ["--plain-http"] if prefix.split("/")[0].split(":")[0] in ("localhost", "127.0.0.1") else []


def push_chart(prefix: str, helm: str, version: str) -> str:
    """``helm package`` + ``helm push``: returns the chart's ``oci://`` reference (without version)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([helm, "package", str(CHART), "--destination", tmp], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"publish: helm package failed: {out.stderr.strip()}")
        package = Path(tmp) / f"dpjob-operator-{version}.tgz"
        if not package.exists():
            raise SystemExit(f"publish: helm package did not write {package.name}: the chart's version must be "
                             f"{version} (pyproject.toml); set helm/dpjob-operator/Chart.yaml version and appVersion")
        out = subprocess.run([helm, "push", str(package), f"oci://{prefix}/charts", *helm_plain_http(prefix)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"publish: helm push to oci://{prefix}/charts failed: {out.stderr.strip()}")
    ref = f"oci://{prefix}/charts/dpjob-operator"
    print(f"[publish] chart: {ref} --version {version}", file=sys.stderr)
    return ref


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_push = sub.add_parser("push", help="push images (default: the product images)")
    p_push.add_argument("names", nargs="*", default=list(PRODUCT_IMAGES))
    p_push.add_argument("--dev", action="store_true", help="also an immutable dev-<name>-<key> tag")
    p_chart = sub.add_parser("chart", help="package and push the chart")
    p_release = sub.add_parser("release", help="the product images and the chart, at VERSION")
    p_release.add_argument("--version", required=True)
    p_release.add_argument("--images", nargs="+", default=list(PRODUCT_IMAGES), help="default: every product image")
    for p in (p_push, p_chart, p_release):
        p.add_argument("--registry", default=os.environ.get("REGISTRY") or registry.DEV_REPOSITORY,
                       help="registry and path prefix, e.g. ghcr.io/dpjob (default: the dev registry)")
    for p in (p_chart, p_release):
        p.add_argument("--helm", required=True, help="the helm binary")
    args = parser.parse_args(argv)
    prefix = args.registry.removeprefix("oci://").rstrip("/")
    version = source_version()
    if prefix.startswith(registry.HOST) and not registry.ready():
        raise SystemExit(f"publish: the dev registry at {registry.HOST} is not running: make cluster-up, or push "
                         "elsewhere with REGISTRY=host/path")
    if args.cmd == "push" and prefix == registry.DEV_REPOSITORY:
        from devcluster import cluster  # the dev flow: dev tags, and moved tags forgotten on the nodes

        for name, ref in cluster.built_images(tuple(args.names)).items():
            print(f"{name} {ref}")
    elif args.cmd == "push":
        for name, (ref, _) in push_images(prefix, args.names, version, args.dev).items():
            print(f"{name} {ref}")
    elif args.cmd == "chart":
        print(push_chart(prefix, args.helm, version))
    else:
        if args.version != version:
            raise SystemExit(f"publish: VERSION={args.version} but the source says {version}: set the version in "
                             "pyproject.toml and helm/dpjob-operator/Chart.yaml (version, appVersion), then release")
        pushed = push_images(prefix, args.images, version, dev=False)
        if prefix == registry.DEV_REPOSITORY:
            from devcluster import cluster

            cluster.forget_on_nodes(pushed)
        for name, (ref, _) in pushed.items():
            print(f"{name} {ref}")
        print(push_chart(prefix, args.helm, version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
