"""The images a real node's containerd holds, through ``ctr``: which names moved or were superseded
in the registry since it pulled them, and forgetting those so the kubelet pulls them again.
Standard library only.
"""

from __future__ import annotations

import subprocess

from devcluster.realnode_layout import CTR, RealNode


def ctr(node: RealNode, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([CTR, "--address", str(node.socket), "--namespace", "k8s.io", *args],
                          capture_output=True, text=True, check=check, timeout=timeout)


def image_digests(node: RealNode) -> dict[str, str]:
    """Every image name containerd holds for the CRI, with the manifest digest it points at."""
    out = ctr(node, "images", "ls", check=False, timeout=60)
    digests = {}
    for line in out.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:"):
            digests[fields[0]] = fields[2]
    return digests


def moved_tags(held: dict[str, str], pushed: dict[str, str], also_as: dict[str, str]) -> list[str]:
    """The names a node holds whose tag now points at another manifest in the registry.

    ``held``: name -> digest on the node; ``pushed``: reference -> digest the registry now serves;
    ``also_as``: registry prefix -> the public prefix the node mirrors to it (``localhost:5000/dpjob``
    -> ``ghcr.io/dpjob``), so the public name of a moved tag is forgotten too."""
    names = {}
    for ref, digest in pushed.items():
        names[ref] = digest
        for prefix, public in also_as.items():
            if ref.startswith(prefix + "/"):
                names[public + ref[len(prefix):]] = digest
    return [name for name, digest in names.items() if name in held and held[name] != digest]


def superseded(held: list[str], current: list[str]) -> list[str]:
    """Superseded dev builds (``...:dev-<name>-<key>`` of an image ``current`` names with another key)
    and the names an archive import of an earlier layout of this cache left behind."""
    def older_build(name: str) -> bool:
        repo, _, tag = name.rpartition(":")
        return tag.startswith("dev-") and name not in current and any(
            c.rpartition(":")[0] == repo and c.rpartition(":")[2].rsplit("-", 1)[0] == tag.rsplit("-", 1)[0]
            for c in current)

    return [name for name in held if name.startswith(("localhost/dpjob/", "import-")) or older_build(name)]


def forget(node: RealNode, pushed: dict[str, str], also_as: dict[str, str], current: list[str]) -> list[str]:
    """Remove moved tags and superseded builds from the node (``moved_tags``, ``superseded``): the
    kubelet pulls what is absent; a running container keeps its snapshot; containerd frees the rest."""
    held = image_digests(node)
    names = list(dict.fromkeys(moved_tags(held, pushed, also_as) + superseded(list(held), current)))
    if names:
        ctr(node, "images", "rm", *names, check=False)
    return names
