"""Pure: what the operator would create for a parsed job, computed by the operator's own builders.

Nothing is re-implemented here: the pods come from ``builders.pods.build_rank_pod`` (which calls
``builders.env.build_rank_env``), the rank table from ``builders.ranktable.build_rank_tables`` fed
with placeholder pods (the real IPs and devices only exist once the pods run), the gang size from
``builders.gang``. This module only picks which ranks to show and arranges the results as data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dpjob_cli.errors import CliError, ExitCode
from dpjob_operator.api import constants as c
from dpjob_operator.api.names import pod_group_name, rank_pod_name, ranktable_configmap_name
from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.api.spec import Job
from dpjob_operator.builders.configmaps import rank_table_request, ranktable_layout
from dpjob_operator.builders.env import effective_backend, rank_table_file
from dpjob_operator.builders.gang import gang_min_count
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.builders.ranktable import (
    ASCEND_DEVICE_ANNOTATION,
    GENERIC_FILE,
    HCCL_FILE,
    RankPod,
    RankTableError,
    build_rank_tables,
    select_hccl_version,
)

SHOWN_WHEN_MANY = 3  # ranks shown without --all-ranks when the job has more than 4: 0, 1 and the last


def shown_ranks(replicas: int, all_ranks: bool) -> list[int]:
    if all_ranks or replicas <= 4:
        return list(range(replicas))
    return [0, 1, replicas - 1]


def job_summary(job: Job, pool: PoolConfig, gang: bool) -> dict[str, Any]:
    spec = job.spec
    return {"name": job.name, "namespace": job.namespace, "replicas": spec.replicas,
            "procsPerReplica": spec.procs_per_replica, "worldSize": spec.world_size,
            "accelerator": spec.accelerator, "framework": spec.framework,
            "backend": effective_backend(job, pool), "rendezvous": spec.rendezvous.mode,
            "gangScheduled": gang, "gangMinCount": gang_min_count(job),
            "restartPolicy": spec.run_policy.restart_policy, "backoffLimit": spec.run_policy.backoff_limit}


def rank_pods(job: Job, pool: PoolConfig, ranks: Sequence[int], gang: bool,
              cluster_domain: str = "cluster.local") -> list[dict[str, Any]]:
    """The exact pod objects of gang generation 0 for ``ranks``."""
    group = pod_group_name(job.name, 0) if gang else None
    return [build_rank_pod(job, i, 0, pool, cluster_domain, pod_group=group) for i in ranks]


def trainer(pod: Mapping[str, Any]) -> dict[str, Any]:
    return next(ctr for ctr in pod["spec"]["containers"] if ctr.get("name") == c.TRAINER_CONTAINER)


def pod_summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    spec, ctr = pod["spec"], trainer(pod)
    res = ctr.get("resources") or {}
    return {"rank": int(pod["metadata"]["labels"][c.LABEL_RANK]), "name": pod["metadata"]["name"],
            "image": ctr.get("image"), "command": [*(ctr.get("command") or []), *(ctr.get("args") or [])],
            "nodeSelector": spec.get("nodeSelector") or {}, "tolerations": spec.get("tolerations") or [],
            "requests": res.get("requests") or {}, "limits": res.get("limits") or {},
            "podGroup": (spec.get("schedulingGroup") or {}).get("podGroupName"),
            "volumes": [v["name"] for v in spec.get("volumes") or []]}


def _env_value(item: Mapping[str, Any]) -> str:
    if "value" in item:
        return str(item["value"])
    source = item.get("valueFrom") or {}
    return f"<from {next(iter(source), 'elsewhere')}>"


def container_env(ctr: Mapping[str, Any], configmaps: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """What the kubelet gives a container: its ``envFrom`` ConfigMaps (from ``configmaps``: name ->
    data; one not given shows as unknown) in order, then its ``env``, which wins."""
    env: dict[str, str] = {}
    for source in ctr.get("envFrom") or []:
        name = (source.get("configMapRef") or {}).get("name")
        data = configmaps.get(name or "")
        if data is None:
            env[f"<envFrom {name or next(iter(source), 'source')}>"] = "<not shown>"
        else:
            env.update({f"{source.get('prefix', '')}{key}": value for key, value in data.items()})
    env.update({e["name"]: _env_value(e) for e in ctr.get("env") or []})
    return env


def env_table(pods: Sequence[Mapping[str, Any]],
              configmaps: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Any]:
    """The trainer's environment per rank (``envFrom`` resolved through ``configmaps``): variables
    equal on every shown rank once, the rest per rank."""
    per_rank = {int(p["metadata"]["labels"][c.LABEL_RANK]): container_env(trainer(p), configmaps or {}) for p in pods}
    names: list[str] = []
    for env in per_rank.values():
        names += [n for n in env if n not in names]
    common: dict[str, str] = {}
    varying: dict[str, dict[str, str]] = {}
    for name in names:
        values = {rank: env.get(name, "") for rank, env in per_rank.items()}
        if len(set(values.values())) == 1 and len(per_rank) > 1:
            common[name] = next(iter(values.values()))
        else:
            varying[name] = {str(rank): value for rank, value in values.items()}
    return {"common": common, "perRank": varying}


def _placeholder_pod(job: Job, index: int, devices: int) -> RankPod:
    annotations: dict[str, str] = {}
    if job.spec.accelerator == "npu":
        annotations[ASCEND_DEVICE_ANNOTATION] = json.dumps({
            "pod_name": rank_pod_name(job.name, index), "server_id": f"<server-id-{index}>",
            "devices": [{"device_id": str(d), "device_ip": "<device-ip>", "super_device_id": "<super-device-id>"}
                        for d in range(devices)]})
    return RankPod(index=index, name=rank_pod_name(job.name, index), uid=f"<uid-{index}>", node="<node>",
                   pod_ip="<pod-ip>", host_ip="<host-ip>", annotations=annotations)


def _layout(files: Mapping[str, str], pod_names: Sequence[str]) -> list[dict[str, Any]]:
    """pod -> its global ranks, from the generic table (or hccl.json, servers in pod order, when alone)."""
    if GENERIC_FILE in files:
        table = json.loads(files[GENERIC_FILE])
        return [{"pod": s["pod"], "ranks": [r["rank"] for r in s["ranks"]],
                 "devices": [r["deviceId"] for r in s["ranks"]]} for s in table["servers"]]
    table = json.loads(files[HCCL_FILE])
    return [{"pod": name, "ranks": [int(d["rank_id"]) for d in s["device"]],
             "devices": [d["device_id"] for d in s["device"]]}
            for name, s in zip(pod_names, table["server_list"], strict=True)]


def rank_table_view(job: Job, ranks: Sequence[int]) -> dict[str, Any]:
    """The rank-table files, their mount and how global ranks map onto pods (devices where known)."""
    if job.spec.rank_table.format == "none":
        return {"enabled": False}
    request = rank_table_request(job, 0)
    try:
        result = build_rank_tables(request, [_placeholder_pod(job, i, request.procs_per_replica)
                                             for i in range(job.spec.replicas)])
    except RankTableError as exc:
        raise CliError(ExitCode.INVALID_SPEC, f"invalid spec: {exc}") from None
    names = [rank_pod_name(job.name, i) for i in range(job.spec.replicas)]
    layout = _layout(result.files, names) if result.ready else []
    wanted = {names[i] for i in ranks}
    return {"enabled": True, "configMap": ranktable_configmap_name(job.name),
            "configMaps": ranktable_layout(job),
            "mountPath": job.spec.rank_table.mount_path, "rankTableFile": rank_table_file(job),
            "files": sorted(result.files), "version": result.version,
            "hcclVersion": select_hccl_version(request) if HCCL_FILE in result.files else None,
            "layout": [row for row in layout if row["pod"] in wanted],
            "note": "IPs and devices are filled in once every rank pod runs; until then each file reads "
                    '{"status": "initializing"}'}
