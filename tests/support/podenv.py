"""A container's environment as the kubelet makes it: ``envFrom`` sources in order, then ``env`` in
order, each ``$(VAR)`` expanded against what came before (an unknown reference stays as written).

The rank pods take the variables every rank shares from the job's ConfigMap (builders/shared_env.py),
so a test that reads a pod's ``env`` alone sees only the rank's own; these helpers give what the
trainer process sees."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dpjob_operator.api.names import env_configmap_name
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.shared_env import shared_env

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def kubelet_env(container: Mapping[str, Any], configmaps: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """``configmaps``: name -> data of every ConfigMap an ``envFrom`` names (a missing one raises,
    as the kubelet refuses to start the container)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or {}
        data = configmaps[ref["name"]]
        env.update({f"{source.get('prefix', '')}{key}": value for key, value in data.items()})
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = _REFERENCE.sub(lambda m: env.get(m.group(1), m.group(0)), str(item["value"]))
    return env


def rank_env(pod: Mapping[str, Any], job: Job, pool: PoolConfig, container: str = "trainer",
             cluster_domain: str = "cluster.local") -> dict[str, str]:
    """The environment of ``container`` in a rank pod built from ``job`` (its shared map built the same way)."""
    ctr = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return kubelet_env(ctr, {env_configmap_name(job.name): shared_env(job, pool, cluster_domain)})
