"""Pure constructors of the rank pods and the headless Service (mpi-operator's newWorker style).

Deterministic output: the same job, index and generation always give the same dict, so a
reconcile test can compare exact objects and the operator can recreate a gang identically.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api.kueue import Placement
from dpjob_operator.api.labels import generation_match_labels, job_labels, rank_labels
from dpjob_operator.api.names import (
    mindx_configmap_name,
    rank_pod_name,
    service_name,
)
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.spec import Job
from dpjob_operator.api.termination import TERMINATION_POLICY
from dpjob_operator.builders.configmaps import ranktable_layout
from dpjob_operator.builders.env import merge_env
from dpjob_operator.builders.restart_rules import apply_in_place
from dpjob_operator.builders.shared_env import env_from, own_env

RANKTABLE_VOLUME = "dpjob-ranktable"
MINDX_VOLUME = "dpjob-mindx-ranktable"
METRICS_PORT = c.METRICS_PORT


def build_headless_service(job: Job) -> dict[str, Any]:
    """One headless Service for the whole gang; DNS records exist before the pods are Ready.

    It selects rank 0 only unless the job asks for every rank (``rendezvous.dnsRecords``): rank 0
    is the one name every launcher resolves (MASTER_ADDR, the c10d store, msrun's scheduler), and
    peers reach each other by the IPs they exchange there. Selecting all N ranks makes the
    Endpoints and EndpointSlice controllers rewrite objects listing every rank again and again
    while the gang starts (at 512 ranks ~130 writes and ~0.9 s to all Running on 2 cores)."""
    selector = job_labels(job) if job.spec.rendezvous.dns_records == "allRanks" else {
        **job_labels(job), c.LABEL_RANK: "0"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(job.name), "namespace": job.namespace, "labels": job_labels(job),
                     "ownerReferences": [job.owner_reference]},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [{"name": "rendezvous", "port": job.spec.rendezvous.port,
                       "targetPort": job.spec.rendezvous.port, "protocol": "TCP"}],
        },
    }


def _merge_tolerations(user: list[dict[str, Any]], pool: tuple[Mapping[str, Any], ...]) -> list[dict[str, Any]]:
    out = list(user)
    for tol in pool:
        if dict(tol) not in out:
            out.append(dict(tol))
    return out


def _set_device_request(container: dict[str, Any], resource: str, count: int) -> None:
    """Extended resources need requests == limits; a user's explicit value is kept."""
    res = container.setdefault("resources", {})
    limits = res.setdefault("limits", {})
    requests = res.setdefault("requests", {})
    limits.setdefault(resource, str(count))
    requests[resource] = limits[resource]


def _add_same_domain_affinity(pod_spec: dict[str, Any], job: Job, restart: int, key: str) -> None:
    """Ranks of one gang share the ``key`` domain (JobSet's exclusive-topology style).

    Without gang scheduling the first rank picks the domain and the rest follow it; with it, the
    PodGroup's topology constraint picks a domain the whole gang fits in and this term agrees.
    Only this generation's ranks count, so a dying gang does not pin the next one.
    """
    term = {"labelSelector": {"matchLabels": generation_match_labels(job, restart)}, "topologyKey": key}
    affinity = pod_spec.setdefault("affinity", {}).setdefault("podAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
    if term not in required:
        required.append(term)


def _avoid_nodes(pod_spec: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """``kubernetes.io/hostname NotIn nodes``, ANDed into every required node-selector term (the
    terms are ORed, so one term without it would let the pod back onto an avoided node)."""
    expression = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": list(nodes)}
    node_affinity = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term.setdefault("matchExpressions", []).append(dict(expression))


def rank_node_selector(job: Job, pool: PoolConfig) -> dict[str, str]:
    """What every rank pod selects: the pool's node labels under the template's own nodeSelector."""
    return {**dict(pool.node_selector), **((job.spec.template.get("spec") or {}).get("nodeSelector") or {})}


def _admit(pod: dict[str, Any], admission: Placement) -> None:
    """Kueue's admission (reconcile/kueue_admission.py): its ResourceFlavors' node labels and tolerations
    ANDed into the pod's, its labels and annotations added (a conflicting key was refused before)."""
    spec, meta = pod["spec"], pod["metadata"]
    if admission.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **admission.node_selector}
    if admission.tolerations:
        spec["tolerations"] = _merge_tolerations(spec.get("tolerations") or [], admission.tolerations)
    meta["labels"] = {**admission.labels, **meta["labels"]}  # the rank's own labels identify it: they win
    meta["annotations"] = {**admission.annotations, **meta["annotations"]}


def _place(pod_spec: dict[str, Any], job: Job, index: int, restart: int, pool: PoolConfig,
           pod_group: str | None) -> None:
    """Where the pod runs: its stable DNS name, its gang, its topology domain and its node pool."""
    pod_spec["restartPolicy"] = "Never"
    pod_spec["hostname"] = rank_pod_name(job.name, index)
    pod_spec["subdomain"] = service_name(job.name)
    pod_spec.setdefault("enableServiceLinks", False)  # thousands of service env vars help nobody
    if pod_group:
        pod_spec["schedulingGroup"] = {"podGroupName": pod_group}
    if job.spec.topology_key:
        _add_same_domain_affinity(pod_spec, job, restart, job.spec.topology_key)
    pod_spec["nodeSelector"] = rank_node_selector(job, pool)
    if not pod_spec["nodeSelector"]:
        del pod_spec["nodeSelector"]
    tolerations = _merge_tolerations(pod_spec.get("tolerations") or [], pool.tolerations)
    if tolerations:
        pod_spec["tolerations"] = tolerations


def _rank_table_volumes(job: Job) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) of the rank-table ConfigMaps; none when rank tables are disabled."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    rt = job.spec.rank_table
    if rt.format != "none":
        maps = sorted(set(ranktable_layout(job).values()))
        if len(maps) == 1:
            volumes.append({"name": RANKTABLE_VOLUME, "configMap": {"name": maps[0]}})
        else:  # one map per file, all files under one directory, updated in place like a configMap volume
            volumes.append({"name": RANKTABLE_VOLUME,
                            "projected": {"sources": [{"configMap": {"name": name}} for name in maps]}})
        mounts.append({"name": RANKTABLE_VOLUME, "mountPath": rt.mount_path, "readOnly": True})
        if rt.mindx_compatible and job.spec.accelerator == "npu":
            volumes.append({"name": MINDX_VOLUME, "configMap": {"name": mindx_configmap_name(job.name)}})
            mounts.append({"name": MINDX_VOLUME, "mountPath": c.MINDX_MOUNT_PATH, "readOnly": True})
    return volumes, mounts


def _trainer_ports(container: dict[str, Any], port: int) -> list[dict[str, Any]]:
    """The user's ports plus rendezvous and metrics, unless the user already declared them."""
    ports = list(container.get("ports") or [])
    if not any(p.get("containerPort") == port for p in ports):
        ports.append({"name": "rendezvous", "containerPort": port, "protocol": "TCP"})
    if not any(p.get("name") == "metrics" or p.get("containerPort") == METRICS_PORT for p in ports):
        # The trainer's Prometheus endpoint; the chart's PodMonitor selects this port name.
        ports.append({"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"})
    return ports


def _inject(container: dict[str, Any], job: Job, pool: PoolConfig, env: list[tuple[str, str]],
            mounts: list[dict[str, Any]]) -> None:
    """Our env (the shared part through ``envFrom``, last so that it wins over the user's own
    sources as inline variables did) and mounts into one container; devices and ports into the
    trainer only."""
    container["env"] = merge_env(container.get("env"), env)
    shared = env_from(job)
    container["envFrom"] = [source for source in container.get("envFrom") or [] if source != shared] + [shared]
    existing = {m.get("mountPath") for m in container.get("volumeMounts") or []}
    extra = [m for m in mounts if m["mountPath"] not in existing]
    if extra:
        container["volumeMounts"] = list(container.get("volumeMounts") or []) + extra
    # The kubelet then keeps a traceback (or torchrun's error.json) as the termination message:
    # status.lastFailure names the cause without anyone reading logs. A user's choice is kept.
    container.setdefault("terminationMessagePolicy", TERMINATION_POLICY)
    if container.get("name") == c.TRAINER_CONTAINER:
        if pool.device_resource and job.spec.devices_per_replica > 0:
            _set_device_request(container, pool.device_resource, job.spec.devices_per_replica)
        container["ports"] = _trainer_ports(container, job.spec.rendezvous.port)


def build_rank_pod(job: Job, index: int, restart: int, pool: PoolConfig,
                   cluster_domain: str = "cluster.local", pod_group: str | None = None,
                   avoid_nodes: tuple[str, ...] = (), in_place: bool = False,
                   admission: Placement | None = None) -> dict[str, Any]:
    """Rank pod ``index`` of gang generation ``restart``; in PodGroup ``pod_group`` when gang-scheduled;
    never on ``avoid_nodes`` (the nodes a failed rank left bad: reconcile/placement.py); restarted in
    place on a retriable exit when ``in_place`` (builders/restart_rules.py); placed where Kueue admitted
    it (``admission``: reconcile/kueue_gate.py)."""
    spec = job.spec
    template = copy.deepcopy(dict(spec.template))
    tmeta = template.get("metadata") or {}
    pod_spec: dict[str, Any] = template.get("spec") or {}
    labels = {**(tmeta.get("labels") or {}), **rank_labels(job, index, restart)}
    annotations = {**(tmeta.get("annotations") or {}), c.ANNOTATION_REPLICAS: str(spec.replicas),
                   c.ANNOTATION_WORLD_SIZE: str(spec.world_size)}
    _place(pod_spec, job, index, restart, pool, pod_group)
    if avoid_nodes:
        _avoid_nodes(pod_spec, avoid_nodes)

    env = own_env(job, index, restart, pool, cluster_domain)  # the rest: builders/shared_env.py
    table_volumes, mounts = _rank_table_volumes(job)
    volumes = list(pod_spec.get("volumes") or []) + table_volumes
    if volumes:
        pod_spec["volumes"] = volumes
    for container in pod_spec.get("containers", []):
        if container.get("name") == c.TRAINER_CONTAINER or spec.inject_env_into == "all":
            _inject(container, job, pool, env, mounts)
    if in_place:
        apply_in_place(pod_spec, spec.run_policy.restart_policy, spec.run_policy.backoff_limit)
    # Nothing of ours in a rank pod talks to the API server: no token unless the template asks for one.
    pod_spec.setdefault("automountServiceAccountToken", False)

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": rank_pod_name(job.name, index), "namespace": job.namespace, "labels": labels,
                     "annotations": annotations, "ownerReferences": [job.owner_reference]},
        "spec": pod_spec,
    }
    if admission is not None:
        _admit(pod, admission)
    return pod
