"""The per-job NetworkPolicy (``spec.isolation: Job``): who may connect to a job's rank pods.

A rank pod listens on the rendezvous store (rank 0: torchrun's c10d or env:// store, msrun's
scheduler), the collectives' ports (gloo, NCCL, HCCL pick them at run time) and the trainer's
metrics ports. None of them authenticates, so any pod of the cluster could join or disturb the
group. The policy admits, on every port, only pods of the same job, and on the metrics ports
(``DPJOB_METRICS_PORT`` + local rank) the scrapers the operator is configured with (Prometheus, the
operator itself for ``status.progress``). Egress stays open: data, checkpoints and images live
elsewhere. A policy only takes effect where the cluster runs a NetworkPolicy engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpjob_operator.api.labels import job_labels
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.env import metrics_port

ISOLATED = "Job"


def network_policy_name(job_name: str) -> str:
    return job_name


def wants_network_policy(job: Job, enabled: bool) -> bool:
    """The operator's config allows policies and the job did not opt out."""
    return enabled and job.spec.isolation == ISOLATED


def build_network_policy(job: Job, metrics_from: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Ingress to the job's rank pods from its own pods, and from ``metrics_from`` (NetworkPolicy
    peers) to the metrics ports only."""
    ranks = {"matchLabels": job_labels(job)}
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": ranks}]}]
    if metrics_from:
        first = metrics_port(job)
        port: dict[str, Any] = {"protocol": "TCP", "port": first}
        if job.spec.procs_per_replica > 1:  # one endpoint per local rank
            port["endPort"] = first + job.spec.procs_per_replica - 1
        ingress.append({"from": [dict(peer) for peer in metrics_from], "ports": [port]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": network_policy_name(job.name), "namespace": job.namespace, "labels": job_labels(job),
                     "ownerReferences": [job.owner_reference]},
        "spec": {"podSelector": ranks, "policyTypes": ["Ingress"], "ingress": ingress},
    }
