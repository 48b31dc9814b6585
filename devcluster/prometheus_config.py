"""Prometheus configurations, as JSON-compatible YAML (no PyYAML needed): static targets
(:func:`render_config`, for tests that serve metrics from the test process), or Kubernetes pod
discovery through the API server (:func:`render_cluster_config`) with the same relabelling as the
chart's PodMonitor and ServiceMonitor. Pure, standard library only; devcluster/prometheus.py
starts a Prometheus with them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

OPERATOR_JOB = "dpjob-operator"
TRAINER_JOB = "dpjob-trainers"


def render_config(operator_targets: Sequence[str] = ("127.0.0.1:8080",),
                  trainer_targets: Sequence[str] = (), *, job_name: str = "test-job",
                  namespace: str = "default", scrape_interval: str = "1s",
                  trainer_labels: Sequence[Mapping[str, str]] | None = None) -> str:
    """Prometheus YAML (written as JSON-compatible YAML, so no PyYAML is needed).

    Each trainer target is its own static_config so it can carry its rank label; pass
    ``trainer_labels`` (one mapping per target) to override or extend the defaults.
    """
    trainer_configs = []
    for i, target in enumerate(trainer_targets):
        labels = {"namespace": namespace, "dpjob_job": job_name, "dpjob_rank": str(i),
                  "pod": f"{job_name}-rank-{i}"}
        if trainer_labels is not None and i < len(trainer_labels):
            labels.update(trainer_labels[i])
        trainer_configs.append({"targets": [target], "labels": labels})
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": OPERATOR_JOB, "metrics_path": "/metrics",
             "static_configs": [{"targets": list(operator_targets)}] if operator_targets else []},
            {"job_name": TRAINER_JOB, "metrics_path": "/metrics", "static_configs": trainer_configs},
        ],
    }
    return json.dumps(config, indent=2) + "\n"


# What the chart's PodMonitor does for trainer pods, as plain kubernetes_sd relabelling: keep pods
# the operator made, scrape the container ports named ``metrics``, and label them as the
# dashboards expect (``namespace``, ``pod``, ``dpjob_job``, ``dpjob_rank``, ``dpjob_restart``).
TRAINER_RELABEL = [
    {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_managed_by"], "regex": "dpjob-operator",
     "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_labelpresent_dpjob_io_job_name"], "regex": "true", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    {"source_labels": ["__meta_kubernetes_pod_label_dpjob_io_job_name"], "target_label": "dpjob_job"},
    {"source_labels": ["__meta_kubernetes_pod_label_dpjob_io_rank"], "target_label": "dpjob_rank"},
    {"source_labels": ["__meta_kubernetes_pod_label_dpjob_io_restart"], "target_label": "dpjob_restart"},
]
# The operator pod the chart installs (its ServiceMonitor scrapes the port named http-metrics).
OPERATOR_RELABEL = [
    {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "regex": "dpjob-operator",
     "action": "keep"},
    {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "http-metrics", "action": "keep"},
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
]


def render_cluster_config(kubeconfig: str | Path, operator_targets: Sequence[str] = (),
                          scrape_interval: str = "1s", token_file: str | Path | None = None) -> str:
    """Prometheus config that discovers pods through the API server (``kubernetes_sd_configs``).

    Trainer pods and the operator pod are found by discovery; ``operator_targets`` adds an
    operator that runs as a process (the integration tests' operator) under the same job name.
    ``token_file`` holds the bearer token the chart's operator pod asks for (metrics.auth).
    """
    sd = [{"role": "pod", "kubeconfig_file": str(kubeconfig)}]
    operator_job: dict = {"job_name": OPERATOR_JOB, "kubernetes_sd_configs": sd, "relabel_configs": OPERATOR_RELABEL}
    if token_file:
        operator_job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
    if operator_targets:
        operator_job["static_configs"] = [{"targets": list(operator_targets)}]
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [operator_job,
                           {"job_name": TRAINER_JOB, "kubernetes_sd_configs": sd, "relabel_configs": TRAINER_RELABEL}],
    }
    return json.dumps(config, indent=2) + "\n"
