"""Leader election's settings: on or off, where the Lease lives, and who this replica is.

On by default in a pod (so ``replicas: 2`` or a rolling update never has two writers), off by
default for a plain ``python -m dpjob_operator`` (a developer's single process); either can be
forced with ``DPJOB_LEADER_ELECTION``. The Lease lives in the operator's own namespace, which a
pod learns from the downward API (``DPJOB_POD_NAMESPACE``) or its ServiceAccount mount. The
identity written into the Lease must differ between any two replicas, including a pod and its
restarted self (a new process must not take over the old one's Lease as "mine" while the old one
may still be writing): the pod name plus a random suffix, as client-go does, else hostname_pid.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpjob_operator.api.lease import LEASE_NAME, LeaseTimings

SERVICEACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class LeaderElectionConfig:
    enabled: bool = False
    namespace: str = "default"
    lease_name: str = LEASE_NAME
    identity: str = ""
    timings: LeaseTimings = field(default_factory=LeaseTimings)


def leader_election_config(raw: Mapping[str, Any], env: Mapping[str, str],
                           serviceaccount_namespace: Path = SERVICEACCOUNT_NAMESPACE) -> LeaderElectionConfig:
    """From the config file's ``leaderElection`` section (``enabled``, ``namespace``,
    ``leaseName``) and the environment, which wins (``DPJOB_LEADER_ELECTION``,
    ``DPJOB_LEADER_ELECTION_NAMESPACE``, ``DPJOB_LEADER_ELECTION_LEASE_NAME``)."""
    own_namespace = env.get("DPJOB_POD_NAMESPACE") or _read(serviceaccount_namespace)
    in_cluster = bool(env.get("KUBERNETES_SERVICE_HOST")) and own_namespace is not None
    enabled = _flag(env.get("DPJOB_LEADER_ELECTION"), raw.get("enabled"), default=in_cluster)
    namespace = (env.get("DPJOB_LEADER_ELECTION_NAMESPACE") or raw.get("namespace") or own_namespace
                 or "default")
    lease_name = env.get("DPJOB_LEADER_ELECTION_LEASE_NAME") or raw.get("leaseName") or LEASE_NAME
    return LeaderElectionConfig(enabled=enabled, namespace=str(namespace), lease_name=str(lease_name),
                                identity=identity(env))


def identity(env: Mapping[str, str]) -> str:
    """``<pod name>_<random>`` in a pod, ``<hostname>_<pid>`` elsewhere."""
    pod = env.get("DPJOB_POD_NAME")
    if pod:
        return f"{pod}_{uuid.uuid4().hex[:8]}"
    return f"{socket.gethostname()}_{os.getpid()}"


def _flag(env_value: str | None, file_value: object, *, default: bool) -> bool:
    if env_value:
        text = env_value.strip().lower()
        if text not in _TRUE + _FALSE:
            raise ValueError(f"DPJOB_LEADER_ELECTION must be true or false, got {env_value!r}")
        return text in _TRUE
    if file_value is None:
        return default
    if not isinstance(file_value, bool):
        raise ValueError(f"leaderElection.enabled must be true or false, got {file_value!r}")
    return file_value


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
