"""Per-pod /etc/hosts content (pure).

Stands in for cluster DNS: every pod the agent runs is listed with the names a headless Service gives
it (``<hostname>.<subdomain>.<namespace>.svc.cluster.local`` and shorter forms), so ranks resolve each
other. Namespace-relative short names (``<hostname>.<subdomain>``, ``<podname>``) are listed only for
pods of the viewer's own namespace, as the DNS search path would resolve them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

HEADER = "# Kubernetes-managed hosts file (dpjob node agent): rewritten in place when pods come and go.\n"
LOCAL = ("127.0.0.1\tlocalhost\n"
         "::1\tlocalhost ip6-localhost ip6-loopback\n"
         "fe00::0\tip6-localnet\n"
         "fe00::0\tip6-mcastprefix\n"
         "fe00::1\tip6-allnodes\n"
         "fe00::2\tip6-allrouters\n")


@dataclass(frozen=True)
class PodHost:
    """What the hosts file needs to know about one pod."""

    namespace: str
    name: str
    ip: str
    hostname: str = ""
    subdomain: str = ""

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], ip: str) -> "PodHost":
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return cls(namespace=meta.get("namespace") or "default", name=meta.get("name") or "", ip=ip,
                   hostname=spec.get("hostname") or "", subdomain=spec.get("subdomain") or "")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _dedupe(names: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    return [n for n in names if n and not (n in seen or seen.add(n))]


def names_for(entry: PodHost, viewer_namespace: str, is_self: bool = False,
              cluster_domain: str = "cluster.local") -> list[str]:
    """Names under which ``entry`` is visible to a pod of ``viewer_namespace``."""
    same = entry.namespace == viewer_namespace
    names: list[str] = []
    if entry.hostname and entry.subdomain:
        base = f"{entry.hostname}.{entry.subdomain}.{entry.namespace}"
        names += [f"{base}.svc.{cluster_domain}", f"{base}.svc", base]
        if same:
            names.append(f"{entry.hostname}.{entry.subdomain}")
    if is_self:
        names.append(entry.hostname or entry.name)
    if same:
        names.append(entry.name)
    return _dedupe(names)


def render_hosts(self_entry: PodHost, others: Sequence[PodHost],
                 host_aliases: Sequence[Mapping[str, Any]] = (), cluster_domain: str = "cluster.local") -> str:
    """The hosts file of the pod ``self_entry``: localhost, itself, the other pods, then hostAliases."""
    lines = [HEADER, LOCAL]
    if self_entry.ip:
        own = names_for(self_entry, self_entry.namespace, True, cluster_domain)
        lines.append(f"{self_entry.ip}\t{' '.join(own)}\n")
    peers = [o for o in others if o.ip and o.key != self_entry.key and o.ip != self_entry.ip]
    peers.sort(key=lambda o: (o.namespace != self_entry.namespace, o.namespace, o.name))
    if peers:
        lines.append("# Other pods run by the node agent.\n")
        for peer in peers:
            names = names_for(peer, self_entry.namespace, False, cluster_domain)
            if names:
                lines.append(f"{peer.ip}\t{' '.join(names)}\n")
    if host_aliases:
        lines.append("\n# Entries added by HostAliases.\n")
        for alias in host_aliases:
            if alias.get("ip") and alias.get("hostnames"):
                lines.append(f"{alias['ip']}\t{' '.join(alias['hostnames'])}\n")
    return "".join(lines)


def render_resolv_conf(namespace: str, cluster_domain: str = "cluster.local") -> str:
    """A pod's resolv.conf. There is no cluster DNS: names come from the hosts file. The nameserver is the
    pod's own loopback where nothing listens, so an unknown name fails at once instead of timing out
    against a resolver the pod's network namespace cannot reach (``getent hosts`` asks for IPv6 first and
    would otherwise wait 10 s before finding the IPv4 entry in /etc/hosts)."""
    return (f"# dpjob node agent: no cluster DNS; pod names are in /etc/hosts.\n"
            f"search {namespace}.svc.{cluster_domain} svc.{cluster_domain} {cluster_domain}\n"
            "nameserver 127.0.0.1\noptions ndots:5 timeout:1 attempts:1\n")
