"""Volume contents for a pod: the kubelet's atomic writer, and payloads of configMap, secret,
downwardAPI and projected volumes.

Each volume is a directory ``<pod dir>/volumes/<name>``; the launcher bind-mounts it at every
mountPath inside the container's own mount namespace. For API-backed volumes the directory holds a
timestamped ``..<ts>`` directory with the files, a ``..data`` symlink to it, and one symlink per
top-level entry (``key -> ..data/key``). An update writes a new ``..<ts>`` directory and swaps
``..data`` with a rename, so a reader inside the pod always sees one complete version.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from devcluster.nodeagent.env import EnvError, field_ref, resource_field_ref

log = logging.getLogger("nodeagent.volumes")

# relative path -> (content, mode)
Payload = dict[str, tuple[bytes, int]]


class VolumeError(Exception):
    """The volume cannot be set up yet (the kubelet's FailedMount); retried."""


class AtomicWriter:
    """Writes a payload into ``target`` the way the kubelet does (``..data`` symlink swap)."""

    DATA = "..data"

    def __init__(self, target: Path | str):
        self.target = Path(target)

    def current(self) -> Optional[Payload]:
        data = self.target / self.DATA
        if not data.is_symlink():
            return None
        root = self.target / os.readlink(data)
        out: Payload = {}
        for dirpath, _, files in os.walk(root):
            for f in files:
                p = Path(dirpath) / f
                out[str(p.relative_to(root))] = (p.read_bytes(), p.stat().st_mode & 0o7777)
        return out

    def write(self, payload: Payload) -> bool:
        """Make ``target`` hold exactly ``payload``; returns whether anything changed."""
        for rel in payload:
            if rel.startswith("/") or ".." in Path(rel).parts or rel.startswith(".."):
                raise VolumeError(f"invalid path {rel!r} in volume payload")
        self.target.mkdir(parents=True, exist_ok=True)
        if self.current() == payload:
            return False
        old = None
        data = self.target / self.DATA
        if data.is_symlink():
            old = os.readlink(data)
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        tsdir = Path(tempfile.mkdtemp(prefix=stamp, dir=self.target))
        os.chmod(tsdir, 0o755)
        for rel, (content, mode) in payload.items():
            path = tsdir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            os.chmod(path, mode)
        tmp_link = self.target / "..data_tmp"
        if tmp_link.is_symlink() or tmp_link.exists():
            tmp_link.unlink()
        os.symlink(tsdir.name, tmp_link)
        os.replace(tmp_link, data)
        top = {Path(rel).parts[0] for rel in payload}
        for name in top:
            link = self.target / name
            if not link.is_symlink():
                if link.exists():
                    shutil.rmtree(link) if link.is_dir() else link.unlink()
                os.symlink(f"{self.DATA}/{name}", link)
        for entry in self.target.iterdir():
            if entry.name.startswith(".."):
                continue
            if entry.is_symlink() and entry.name not in top:
                entry.unlink()
        if old and old != tsdir.name:
            shutil.rmtree(self.target / old, ignore_errors=True)
        return True


# --------------------------------------------------------------------------- payloads (pure)

def _mode(item_mode: Any, default_mode: Any) -> int:
    if item_mode is not None:
        return int(item_mode)
    return int(default_mode) if default_mode is not None else 0o644


def keyed_payload(kind: str, name: str, items: Optional[Mapping[str, bytes]], source: Mapping[str, Any],
                  default_mode: Any = None) -> Payload:
    """Payload of a configMap/secret volume (or projection): all keys, or only ``items`` (key -> path)."""
    optional = bool(source.get("optional"))
    if items is None:
        if optional:
            return {}
        raise VolumeError(f'{kind} "{name}" not found')
    mode_default = source.get("defaultMode", default_mode)
    selected = source.get("items")
    if not selected:
        return {k: (v, _mode(None, mode_default)) for k, v in items.items()}
    out: Payload = {}
    for item in selected:
        key = item.get("key", "")
        if key not in items:
            if optional:
                continue
            raise VolumeError(f'configuration of volume: key "{key}" not found in {kind} "{name}"')
        out[item.get("path") or key] = (items[key], _mode(item.get("mode"), mode_default))
    return out


def configmap_bytes(cm: Optional[Mapping[str, Any]]) -> Optional[dict[str, bytes]]:
    if cm is None:
        return None
    out = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return out


def secret_bytes(secret: Optional[Mapping[str, Any]]) -> Optional[dict[str, bytes]]:
    if secret is None:
        return None
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def downward_payload(pod: Mapping[str, Any], source: Mapping[str, Any], default_mode: Any = None,
                     node_allocatable: Mapping[str, Any] | None = None) -> Payload:
    out: Payload = {}
    mode_default = source.get("defaultMode", default_mode)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    for item in source.get("items") or []:
        try:
            if "fieldRef" in item:
                value = field_ref(pod, item["fieldRef"].get("fieldPath", ""))
            elif "resourceFieldRef" in item:
                value = resource_field_ref(pod, containers[0], item["resourceFieldRef"], node_allocatable)
            else:
                continue
        except EnvError as exc:
            raise VolumeError(str(exc)) from exc
        out[item["path"]] = (value.encode(), _mode(item.get("mode"), mode_default))
    return out


# source getters: (namespace, name) -> object dict or None
Getter = Callable[[str, str], Optional[Mapping[str, Any]]]
TokenGetter = Callable[[Mapping[str, Any], Mapping[str, Any]], Optional[str]]


def volume_payload(pod: Mapping[str, Any], volume: Mapping[str, Any], get_configmap: Getter, get_secret: Getter,
                   get_token: TokenGetter | None = None,
                   node_allocatable: Mapping[str, Any] | None = None) -> Optional[Payload]:
    """The files of an API-backed volume, or None for kinds that are plain directories."""
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    if "configMap" in volume:
        src = volume["configMap"]
        return keyed_payload("configmap", src.get("name", ""), configmap_bytes(get_configmap(ns, src.get("name", ""))),
                             src)
    if "secret" in volume:
        src = volume["secret"]
        name = src.get("secretName", "")
        return keyed_payload("secret", name, secret_bytes(get_secret(ns, name)), src)
    if "downwardAPI" in volume:
        return downward_payload(pod, volume["downwardAPI"], node_allocatable=node_allocatable)
    if "projected" in volume:
        proj = volume["projected"]
        out: Payload = {}
        for source in proj.get("sources") or []:
            if "configMap" in source:
                src = source["configMap"]
                out.update(keyed_payload("configmap", src.get("name", ""),
                                         configmap_bytes(get_configmap(ns, src.get("name", ""))), src,
                                         proj.get("defaultMode")))
            elif "secret" in source:
                src = source["secret"]
                out.update(keyed_payload("secret", src.get("name", ""),
                                         secret_bytes(get_secret(ns, src.get("name", ""))), src,
                                         proj.get("defaultMode")))
            elif "downwardAPI" in source:
                out.update(downward_payload(pod, source["downwardAPI"], proj.get("defaultMode"), node_allocatable))
            elif "serviceAccountToken" in source:
                src = source["serviceAccountToken"]
                token = get_token(pod, src) if get_token else None
                if token is not None:
                    out[src.get("path", "token")] = (token.encode(), _mode(None, proj.get("defaultMode")))
        return out
    return None


def is_synced(volume: Mapping[str, Any]) -> bool:
    """Whether the volume's content follows API objects (and so is refreshed periodically)."""
    return any(k in volume for k in ("configMap", "secret", "downwardAPI", "projected"))


def host_path(volume: Mapping[str, Any]) -> Optional[Path]:
    """For a hostPath volume: the path (created when its type asks for it)."""
    src = volume.get("hostPath")
    if not src:
        return None
    path = Path(src.get("path", "/"))
    kind = src.get("type") or ""
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    elif kind in ("Directory", "File") and not path.exists():
        raise VolumeError(f"hostPath {path} does not exist")
    return path
