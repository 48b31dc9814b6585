"""The dev cluster's OCI registry: CNCF distribution (``registry``, built from its Go module by
devcluster/build.sh) on a loopback port, its storage under the cache.

Why a real registry: images reach the dev cluster's nodes the way they reach any cluster. They are
pushed (buildah, devcluster/publish.py) and the kubelet pulls them through the CRI; the chart is
pushed as an OCI artifact and ``helm install`` takes it from there. Every real node's containerd
reads ``hosts.toml`` files (``node_hosts``) that send this registry's own name over plain HTTP and
mirror the public host the examples and the chart's defaults name (``ghcr.io/dpjob/...``) to it,
as an air-gapped cluster mirrors its upstream registries.

The storage outlives the cluster (it is under ~/.cache/dpjob/registry): a multi-GB trainer image is
pushed once per machine, and a code change pushes only its changed layers. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("DPJOB_CACHE", Path.home() / ".cache" / "dpjob"))
PORT = int(os.environ.get("DPJOB_REGISTRY_PORT", "5000"))
HOST = f"localhost:{PORT}"
# Where the dev flow pushes: `make dev`, the tests and `make push` without REGISTRY.
DEV_REPOSITORY = f"{HOST}/dpjob"
STORAGE = CACHE / "registry"
# The public hosts whose images the nodes take from this registry instead (same repository paths).
MIRRORED_HOSTS = ("ghcr.io",)
PUBLIC_REPOSITORY = "ghcr.io/dpjob"
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json"))


def config(storage: Path = STORAGE, port: int = PORT) -> str:
    """distribution's configuration: filesystem storage, deletes allowed (superseded dev tags are
    removed, devcluster/publish.py), loopback only (nothing off this machine can push or pull)."""
    return f"""version: 0.1
log:
  level: warn
  accesslog: {{disabled: true}}
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
  maintenance:
    uploadpurging: {{enabled: true, age: 24h, interval: 1h, dryrun: false}}
http:
  addr: 127.0.0.1:{port}
  headers:
    X-Content-Type-Options: [nosniff]
"""


def command(binary: Path, config_file: Path) -> list[str]:
    return [str(binary), "serve", str(config_file)]


def garbage_collect(binary: Path, config_file: Path) -> subprocess.CompletedProcess[str]:
    """Free the blobs of deleted manifests; run while the registry is stopped (distribution's rule)."""
    return subprocess.run([str(binary), "garbage-collect", "--delete-untagged", str(config_file)],
                          capture_output=True, text=True, timeout=600)


def has_repositories(storage: Path = STORAGE) -> bool:
    """Anything pushed yet (garbage-collect fails on an empty store)."""
    return (storage / "docker" / "registry" / "v2" / "repositories").is_dir()


def ready(port: int = PORT) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def node_hosts(port: int = PORT) -> dict[str, str]:
    """``hosts.toml`` per registry host, for containerd's ``config_path`` (certs.d layout):
    ``localhost:<port>`` itself over plain HTTP, and each mirrored public host served from it.
    containerd falls back to the public host only when the mirror fails."""
    local = f"http://localhost:{port}"
    files = {f"localhost:{port}": f'server = "{local}"\n\n[host."{local}"]\n  capabilities = ["pull", "resolve"]\n'}
    for public in MIRRORED_HOSTS:
        files[public] = (f'server = "https://{public}"\n\n'
                         f'[host."{local}"]\n  capabilities = ["pull", "resolve"]\n')
    return files


def write_node_hosts(directory: Path, port: int = PORT) -> Path:
    for host, text in node_hosts(port).items():
        (directory / host).mkdir(parents=True, exist_ok=True)
        (directory / host / "hosts.toml").write_text(text)
    return directory


def split_reference(ref: str) -> tuple[str, str, str]:
    """``host/repo/path:tag`` -> (host, repo/path, tag)."""
    host, _, rest = ref.partition("/")
    repository, _, tag = rest.rpartition(":")
    if not host or not repository or not tag:
        raise ValueError(f"not a registry reference with a tag: {ref!r}")
    return host, repository, tag


def _request(url: str, method: str = "GET") -> urllib.request.Request:
    return urllib.request.Request(url, method=method, headers={"Accept": MANIFEST_TYPES})


def _scheme(host: str) -> str:
    return "http" if host.split(":")[0] in ("localhost", "127.0.0.1") else "https"


def manifest_digest(ref: str) -> str | None:
    """The digest the registry serves for ``ref`` (``Docker-Content-Digest``), None when absent."""
    host, repository, tag = split_reference(ref)
    try:
        with urllib.request.urlopen(_request(f"{_scheme(host)}://{host}/v2/{repository}/manifests/{tag}", "HEAD"),
                                    timeout=10) as resp:
            return resp.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def tags(host: str, repository: str) -> list[str]:
    try:
        with urllib.request.urlopen(_request(f"{_scheme(host)}://{host}/v2/{repository}/tags/list"),
                                    timeout=10) as resp:
            return list(json.load(resp).get("tags") or [])
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return []
        raise


def delete_manifest(host: str, repository: str, digest: str) -> None:
    url = f"{_scheme(host)}://{host}/v2/{repository}/manifests/{digest}"
    try:
        urllib.request.urlopen(_request(url, "DELETE"), timeout=10).close()
    except urllib.error.HTTPError as err:
        if err.code != 404:
            raise


def disk_usage(storage: Path = STORAGE) -> int:
    return sum(p.stat().st_size for p in storage.rglob("*") if p.is_file()) if storage.exists() else 0
