"""Operator configuration: node pools as data, API rate limits, concurrency, watched namespaces.

Loaded from a YAML/JSON file named by ``DPJOB_CONFIG`` (the Helm chart renders one from
values.yaml) with ``DPJOB_*`` environment overrides for the scalar knobs. Pools are data, not
code, so a cluster admin can rename resources, labels and taints without a release. Leader
election's settings (``election_config.py``) come from the same file and environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dpjob_operator.api.pools import DEFAULT_POOLS, PoolConfig
from dpjob_operator.election_config import SERVICEACCOUNT_NAMESPACE, LeaderElectionConfig, leader_election_config

GANG_MODES = ("auto", "disabled")


@dataclass(frozen=True)
class OperatorConfig:
    pools: Mapping[str, PoolConfig] = field(default_factory=lambda: dict(DEFAULT_POOLS))
    api_qps: float = 100.0            # client-side token bucket (the Python client has none)
    api_burst: int = 200
    create_concurrency: int = 32      # pod creations in flight per job
    workers: int = 8                  # jobs reconciled concurrently
    resync_seconds: float = 30.0      # level-triggered safety net
    namespaces: tuple[str, ...] = ()  # empty = all namespaces
    metrics_port: int = 8080
    health_port: int = 8081
    cluster_domain: str = "cluster.local"
    log_level: str = "INFO"
    # auto: one PodGroup per gang when the API server serves scheduling.k8s.io/v1alpha2
    # (Kubernetes >= 1.35 with GenericWorkload and GangScheduling); disabled: never.
    gang_scheduling: str = "auto"
    # A pod this long past its deletion deadline is stuck Terminating (reconcile/stuck.py); on a
    # NotReady node it is then force-deleted, as the pod GC controller does for a node that is down.
    stuck_terminating_seconds: float = 120.0
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)


def _pool_from_dict(raw: Mapping[str, Any]) -> PoolConfig:
    return PoolConfig(
        device_resource=raw.get("deviceResource"),
        node_selector=dict(raw.get("nodeSelector") or {}),
        tolerations=tuple(raw.get("tolerations") or ()),
        default_backend=raw.get("defaultBackend", "gloo"),
        env=dict(raw.get("env") or {}),
    )


def _read_file(path: str) -> Mapping[str, Any]:
    """The config file: JSON (what the chart renders) or YAML (what a person writes)."""
    text = Path(path).read_text()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        import yaml

        parsed = yaml.safe_load(text)
    return parsed or {}


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None,
                serviceaccount_namespace: Path = SERVICEACCOUNT_NAMESPACE) -> OperatorConfig:
    """Read the config file (if any), then apply ``DPJOB_*`` environment overrides.
    ``serviceaccount_namespace`` is where a pod finds its namespace (tests point it elsewhere)."""
    env = os.environ if environ is None else environ
    cfg = OperatorConfig()
    path = path or env.get("DPJOB_CONFIG")
    raw = _read_file(path) if path else {}
    if path:
        pools = dict(cfg.pools)
        for name, pool in (raw.get("pools") or {}).items():
            pools[name] = _pool_from_dict(pool)
        cfg = replace(
            cfg,
            pools=pools,
            api_qps=float(raw.get("apiQPS", cfg.api_qps)),
            api_burst=int(raw.get("apiBurst", cfg.api_burst)),
            create_concurrency=int(raw.get("createConcurrency", cfg.create_concurrency)),
            workers=int(raw.get("workers", cfg.workers)),
            resync_seconds=float(raw.get("resyncSeconds", cfg.resync_seconds)),
            namespaces=tuple(raw.get("namespaces") or ()),
            metrics_port=int(raw.get("metricsPort", cfg.metrics_port)),
            health_port=int(raw.get("healthPort", cfg.health_port)),
            cluster_domain=raw.get("clusterDomain", cfg.cluster_domain),
            log_level=raw.get("logLevel", cfg.log_level),
            gang_scheduling=str(raw.get("gangScheduling", cfg.gang_scheduling)),
            stuck_terminating_seconds=float(raw.get("stuckTerminatingSeconds", cfg.stuck_terminating_seconds)),
        )
    overrides: dict[str, Any] = {}
    for key, attr, conv in (("DPJOB_API_QPS", "api_qps", float), ("DPJOB_API_BURST", "api_burst", int),
                            ("DPJOB_CREATE_CONCURRENCY", "create_concurrency", int),
                            ("DPJOB_WORKERS", "workers", int), ("DPJOB_RESYNC_SECONDS", "resync_seconds", float),
                            ("DPJOB_METRICS_PORT", "metrics_port", int), ("DPJOB_HEALTH_PORT", "health_port", int),
                            ("DPJOB_LOG_LEVEL", "log_level", str),
                            ("DPJOB_GANG_SCHEDULING", "gang_scheduling", str),
                            ("DPJOB_STUCK_TERMINATING_SECONDS", "stuck_terminating_seconds", float)):
        if env.get(key):
            overrides[attr] = conv(env[key])
    if env.get("DPJOB_NAMESPACES"):
        overrides["namespaces"] = tuple(n.strip() for n in env["DPJOB_NAMESPACES"].split(",") if n.strip())
    overrides["leader_election"] = leader_election_config(raw.get("leaderElection") or {}, env,
                                                          serviceaccount_namespace)
    cfg = replace(cfg, **overrides)
    if cfg.gang_scheduling not in GANG_MODES:
        raise ValueError(f"gangScheduling must be one of {', '.join(GANG_MODES)}, got {cfg.gang_scheduling!r}")
    return cfg
