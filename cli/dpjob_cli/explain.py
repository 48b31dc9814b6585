"""``dpjob explain -f job.yaml``: validate on the server, then show what the operator would create.

1. A server-side dry run (``dryRun=All``, strict field validation): the CRD schema, its defaults and
   its CEL rules judge the object exactly as ``kubectl apply`` would, and a refusal names the field.
2. The operator's own pure code on the defaulted object: ``parse_job``, the rank pods, every rank's
   environment, the rank-table layout (``explain_view``).
3. The node pool from the installed operator's configuration when it can be read, else the defaults.
4. Whether the gang fits the cluster's free capacity now (``capacity``).

No object is created. ``--offline`` skips the steps that need a cluster.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dpjob_cli import explain_view as view
from dpjob_cli.capacity import gang_capacity
from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.kube import Kube
from dpjob_operator.api import constants as c
from dpjob_operator.api.names import env_configmap_name
from dpjob_operator.api.pools import DEFAULT_POOLS, PoolConfig
from dpjob_operator.api.spec import Job, SpecError, parse_job
from dpjob_operator.builders.gang import gang_min_count
from dpjob_operator.builders.shared_env import shared_env

POD_GROUPS = ("scheduling.k8s.io", "v1alpha2", "podgroups")


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The DataParallelJobs in a YAML file (other kinds are skipped; none at all is an error)."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except OSError as exc:
        raise CliError(ExitCode.BAD_INPUT, f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise CliError(ExitCode.BAD_INPUT, f"{path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == c.KIND]
    if not jobs:
        raise CliError(ExitCode.BAD_INPUT, f"{path} has no {c.KIND} (apiVersion {c.API_VERSION})")
    return jobs


def _same_length_name(name: str) -> str:
    """Another valid name of the same length, so name-length CEL rules judge the object unchanged."""
    return name[:-1] + ("x" if name[-1] != "x" else "y")


def server_validate(kube: Kube, doc: dict[str, Any], namespace: str) -> tuple[dict[str, Any], str]:
    """(the object as the API server would store it, with defaults; a note) or CliError(INVALID_SPEC)."""
    body = {**doc, "metadata": {**(doc.get("metadata") or {}), "namespace": namespace}}
    try:
        return kube.create_job(namespace, body, dry_run=True), ""
    except CliError as exc:
        if exc.code != ExitCode.API_ERROR or "already exists" not in exc.message:
            raise
    name = body["metadata"].get("name", "")
    twin = {**body, "metadata": {**body["metadata"], "name": _same_length_name(name)}}
    stored = kube.create_job(namespace, twin, dry_run=True)
    stored["metadata"]["name"] = name
    return stored, f"a job named {name} already exists; validated as a new job"


def pools_from_config(text: str | None) -> tuple[Mapping[str, PoolConfig], str]:
    """Pools of the installed operator (its config.json, read by the operator's own loader), else defaults."""
    if not text:
        return DEFAULT_POOLS, "operator defaults"
    from dpjob_operator.config import load_config

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        handle.write(text)
    try:
        return load_config(handle.name, environ={}).pools, "the installed operator's configuration"
    except (ValueError, TypeError, KeyError, AttributeError):
        return DEFAULT_POOLS, "operator defaults (the installed operator's configuration did not parse)"
    finally:
        os.unlink(handle.name)


def _parse(stored: dict[str, Any]) -> Job:
    try:
        return parse_job(stored)
    except SpecError as exc:
        raise CliError(ExitCode.INVALID_SPEC, f"invalid spec: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(ExitCode.INVALID_SPEC, f"invalid spec: {type(exc).__name__}: {exc}") from None


def _capacity(kube: Kube, job: Job, pod: dict[str, Any]) -> dict[str, Any]:
    try:
        nodes, pods = kube.list_nodes(), kube.list_active_pods()
    except CliError as exc:
        return {"known": False, "note": f"cannot read nodes and pods: {exc.message}"}
    cap = gang_capacity(nodes, pods, pod["spec"], gang_min_count(job), job.spec.topology_key)
    return {"known": True, "fits": cap.fits, "needed": cap.needed, "room": cap.room,
            "eligibleNodes": cap.eligible_nodes, "perNode": cap.per_node, "request": cap.request,
            "topologyKey": job.spec.topology_key, "domain": cap.domain}


def explain_document(doc: dict[str, Any], namespace: str, kube: Kube | None, all_ranks: bool) -> dict[str, Any]:
    """Everything ``explain`` reports about one job, as data (the shape of ``-o json``)."""
    namespace = (doc.get("metadata") or {}).get("namespace") or namespace
    if kube is not None:
        stored, note = server_validate(kube, doc, namespace)
        validation = {"valid": True, "by": "server-side dry run (CRD schema, defaults and CEL rules)", "note": note}
    else:
        stored = {**doc, "metadata": {**(doc.get("metadata") or {}), "namespace": namespace}}
        validation = {"valid": True, "by": "the operator's parser only (--offline: no CRD schema, defaults or CEL)"}
    job = _parse(stored)
    pools, pools_from = pools_from_config(kube.operator_config() if kube else None)
    pool = pools.get(job.spec.accelerator)
    if pool is None:
        raise CliError(ExitCode.INVALID_SPEC,
                       f"the operator has no node pool for accelerator {job.spec.accelerator!r} (pools: "
                       f"{', '.join(sorted(pools))}): the job would wait with PoolAvailable=False")
    gang = (job.spec.run_policy.gang_scheduling != "Disabled" and kube is not None and kube.serves(*POD_GROUPS))
    ranks = view.shown_ranks(job.spec.replicas, all_ranks)
    pods = view.rank_pods(job, pool, ranks, gang)
    return {
        "validation": validation,
        "job": view.job_summary(job, pool, gang),
        "pool": {"name": job.spec.accelerator, "from": pools_from, "deviceResource": pool.device_resource,
                 "nodeSelector": dict(pool.node_selector), "tolerations": [dict(t) for t in pool.tolerations]},
        "shownRanks": ranks,
        "pods": [view.pod_summary(p) for p in pods],
        "env": view.env_table(pods, {env_configmap_name(job.name): shared_env(job, pool)}),
        "rankTable": view.rank_table_view(job, ranks),
        "capacity": _capacity(kube, job, pods[0]) if kube is not None else {"known": False, "note": "--offline"},
        "created": [],
    }


def explain_file(path: Path, namespace: str, kube: Kube | None, all_ranks: bool = False) -> list[dict[str, Any]]:
    return [explain_document(doc, namespace, kube, all_ranks) for doc in load_documents(path)]
