"""Operator configuration: node pools as data, API rate limits, concurrency, watched namespaces.

Loaded from a YAML/JSON file named by ``DPJOB_CONFIG`` (the Helm chart renders one from
values.yaml) with ``DPJOB_*`` environment overrides for the scalar knobs. Pools are data, not
code, so a cluster admin can rename resources, labels and taints without a release. Leader
election's settings (``election_config.py``) come from the same file and environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpjob_operator.api.managed_by import DEFAULT_CONTROLLER, valid_controller_name
from dpjob_operator.api.pools import DEFAULT_POOLS, PoolConfig
from dpjob_operator.election_config import SERVICEACCOUNT_NAMESPACE, LeaderElectionConfig, leader_election_config

GANG_MODES = ("auto", "disabled")
METRICS_AUTH_MODES = ("kubernetes", "none")
SWITCH_MODES = ("enabled", "disabled")


@dataclass(frozen=True)
class OperatorConfig:
    pools: Mapping[str, PoolConfig] = field(default_factory=lambda: dict(DEFAULT_POOLS))
    # A client-side token bucket; <= 0 (the default): none, the API server's Priority and Fairness
    # decides (k8s/ratelimit.py says why).
    api_qps: float = -1.0
    api_burst: int = 200
    create_concurrency: int = 32      # pod creations in flight per job
    workers: int = 8                  # jobs reconciled concurrently
    resync_seconds: float = 30.0      # level-triggered safety net
    # A pod's progress (created, scheduled, Running) is looked at this long after it arrives, so one
    # pass sees a gang's batch (api/pod_changes.py); failures and deletions are looked at at once.
    pod_batch_seconds: float = 0.5
    namespaces: tuple[str, ...] = ()  # empty = all namespaces
    # The jobs this operator runs: those whose spec.managedBy names it (unset names the default).
    controller_name: str = DEFAULT_CONTROLLER
    metrics_port: int = 8080
    health_port: int = 8081
    # Where /metrics and /healthz listen. In a pod, 0.0.0.0: the kubelet probes the pod IP and
    # Prometheus scrapes it; an operator run as a process on a workstation binds 127.0.0.1.
    metrics_bind_address: str = "0.0.0.0"
    health_bind_address: str = "0.0.0.0"
    # kubernetes: /metrics answers only a bearer token that the API server authenticates and
    # authorizes for `get` on the non-resource URL /metrics (metrics_server.py); none: anyone.
    metrics_auth: str = "kubernetes"
    # A certificate and key (PEM) make /metrics HTTPS; empty: plain HTTP.
    metrics_cert_file: str = ""
    metrics_key_file: str = ""
    cluster_domain: str = "cluster.local"
    log_level: str = "INFO"
    # auto: one PodGroup per gang when the API server serves scheduling.k8s.io/v1alpha2
    # (Kubernetes >= 1.35 with GenericWorkload and GangScheduling); disabled: never.
    gang_scheduling: str = "auto"
    # auto: rank pods restart in place (reconcile/inplace.py) when the API server keeps a pod's
    # RestartAllContainers rule (k8s/inplace_probe.py, at start); disabled: every restart recreates.
    restart_in_place: str = "auto"
    # A pod this long past its deletion deadline is stuck Terminating (reconcile/stuck.py); on a
    # NotReady node it is then force-deleted, as the pod GC controller does for a node that is down.
    stuck_terminating_seconds: float = 120.0
    # enabled: a NetworkPolicy per job (spec.isolation: Job) admits only the job's own pods, and
    # network_policy_metrics_from (NetworkPolicy peers: Prometheus, the operator) on the metrics ports.
    network_policy: str = "enabled"
    network_policy_metrics_from: tuple[Mapping[str, Any], ...] = ()
    # auto: a job labelled kueue.x-k8s.io/queue-name waits for Kueue to admit its Workload when the API
    # server serves kueue.x-k8s.io/v1beta2 workloads (Kueue v0.17 with DataParallelJob among its
    # externalFrameworks: docs/kueue.md); disabled: the label is ignored.
    kueue: str = "auto"
    # Kueue runs with its ShortWorkloadNames feature gate: Workload names of at most 63 characters.
    kueue_short_workload_names: bool = False
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


def _flag(value: Any) -> bool:
    """A boolean from JSON, YAML or the environment ("true", "1", "yes", "on"; anything else: false)."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


# The scalar knobs: (config file key, environment override, field, type). Pools, namespaces and
# leader election have shapes of their own and are read below.
SCALARS: tuple[tuple[str, str, str, Callable[[Any], Any]], ...] = (  # sizes: table
    ("apiQPS", "DPJOB_API_QPS", "api_qps", float),
    ("apiBurst", "DPJOB_API_BURST", "api_burst", int),
    ("createConcurrency", "DPJOB_CREATE_CONCURRENCY", "create_concurrency", int),
    ("workers", "DPJOB_WORKERS", "workers", int),
    ("resyncSeconds", "DPJOB_RESYNC_SECONDS", "resync_seconds", float),
    ("podBatchSeconds", "DPJOB_POD_BATCH_SECONDS", "pod_batch_seconds", float),
    ("metricsPort", "DPJOB_METRICS_PORT", "metrics_port", int),
    ("healthPort", "DPJOB_HEALTH_PORT", "health_port", int),
    ("metricsBindAddress", "DPJOB_METRICS_BIND_ADDRESS", "metrics_bind_address", str),
    ("healthBindAddress", "DPJOB_HEALTH_BIND_ADDRESS", "health_bind_address", str),
    ("metricsAuth", "DPJOB_METRICS_AUTH", "metrics_auth", str),
    ("metricsCertFile", "DPJOB_METRICS_CERT_FILE", "metrics_cert_file", str),
    ("metricsKeyFile", "DPJOB_METRICS_KEY_FILE", "metrics_key_file", str),
    ("clusterDomain", "DPJOB_CLUSTER_DOMAIN", "cluster_domain", str),
    ("logLevel", "DPJOB_LOG_LEVEL", "log_level", str),
    ("gangScheduling", "DPJOB_GANG_SCHEDULING", "gang_scheduling", str),
    ("restartInPlace", "DPJOB_RESTART_IN_PLACE", "restart_in_place", str),
    ("stuckTerminatingSeconds", "DPJOB_STUCK_TERMINATING_SECONDS", "stuck_terminating_seconds", float),
    ("networkPolicy", "DPJOB_NETWORK_POLICY", "network_policy", str),
    ("kueue", "DPJOB_KUEUE", "kueue", str),
    ("controllerName", "DPJOB_CONTROLLER_NAME", "controller_name", str),
    ("kueueShortWorkloadNames", "DPJOB_KUEUE_SHORT_WORKLOAD_NAMES", "kueue_short_workload_names", _flag),
)


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None,
                serviceaccount_namespace: Path = SERVICEACCOUNT_NAMESPACE) -> OperatorConfig:
    """Read the config file (if any), then apply ``DPJOB_*`` environment overrides.
    ``serviceaccount_namespace`` is where a pod finds its namespace (tests point it elsewhere)."""
    env = os.environ if environ is None else environ
    path = path or env.get("DPJOB_CONFIG")
    raw = _read_file(path) if path else {}
    values: dict[str, Any] = {}
    for key, env_key, attr, conv in SCALARS:
        if env.get(env_key):
            values[attr] = conv(env[env_key])
        elif key in raw:
            values[attr] = conv(raw[key])
    pools = dict(DEFAULT_POOLS)
    for name, pool in (raw.get("pools") or {}).items():
        pools[name] = _pool_from_dict(pool)
    values["pools"] = pools
    values["namespaces"] = tuple(raw.get("namespaces") or ())
    if env.get("DPJOB_NAMESPACES"):
        values["namespaces"] = tuple(n.strip() for n in env["DPJOB_NAMESPACES"].split(",") if n.strip())
    values["network_policy_metrics_from"] = tuple(dict(peer) for peer in raw.get("networkPolicyMetricsFrom") or ())
    values["leader_election"] = leader_election_config(raw.get("leaderElection") or {}, env,
                                                       serviceaccount_namespace)
    cfg = OperatorConfig(**values)
    _validate(cfg)
    return cfg


def _validate(cfg: OperatorConfig) -> None:
    if cfg.api_qps > 0 and cfg.api_burst < 1:
        raise ValueError(f"apiBurst must be >= 1 when apiQPS > 0, got {cfg.api_burst}")
    if cfg.metrics_auth not in METRICS_AUTH_MODES:
        raise ValueError(f"metricsAuth must be one of {', '.join(METRICS_AUTH_MODES)}, got {cfg.metrics_auth!r}")
    if bool(cfg.metrics_cert_file) != bool(cfg.metrics_key_file):
        raise ValueError("metricsCertFile and metricsKeyFile go together: set both for HTTPS, or neither")
    if cfg.restart_in_place not in GANG_MODES:
        raise ValueError(f"restartInPlace must be one of {', '.join(GANG_MODES)}, got {cfg.restart_in_place!r}")
    if cfg.network_policy not in SWITCH_MODES:
        raise ValueError(f"networkPolicy must be one of {', '.join(SWITCH_MODES)}, got {cfg.network_policy!r}")
    if not valid_controller_name(cfg.controller_name):
        raise ValueError(f"controllerName must be a domain-prefixed name such as {DEFAULT_CONTROLLER} "
                         f"(what a job's spec.managedBy may hold), got {cfg.controller_name!r}")
    if cfg.kueue not in GANG_MODES:
        raise ValueError(f"kueue must be one of {', '.join(GANG_MODES)}, got {cfg.kueue!r}")
    if cfg.gang_scheduling not in GANG_MODES:
        raise ValueError(f"gangScheduling must be one of {', '.join(GANG_MODES)}, got {cfg.gang_scheduling!r}")
