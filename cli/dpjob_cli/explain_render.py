"""Pure: the data of ``explain`` -> the text a person reads (``-o table``, the default)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from dpjob_cli.output import table


def _kv(mapping: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mapping.items()) or "-"


def _tolerations(tols: list[dict[str, Any]]) -> str:
    parts = []
    for tol in tols:
        key = tol.get("key") or "*"
        value = f"={tol['value']}" if tol.get("value") else ""
        parts.append(f"{key}{value}:{tol.get('effect') or '*'}")
    return ", ".join(parts) or "-"


def _header(data: dict[str, Any]) -> list[str]:
    job, val = data["job"], data["validation"]
    lines = [f"DataParallelJob {job['name']} (namespace {job['namespace']}): valid, checked by {val['by']}"]
    if val.get("note"):
        lines.append(f"  note: {val['note']}")
    lines.append(f"  {job['replicas']} rank pod(s) x {job['procsPerReplica']} process(es) = world size "
                 f"{job['worldSize']}; accelerator {job['accelerator']}, framework {job['framework']}, "
                 f"backend {job['backend']}, rendezvous {job['rendezvous']}")
    gang = (f"all or nothing as PodGroup {job['name']}-gang-0 (minCount {job['gangMinCount']})" if job["gangScheduled"]
            else "rank by rank (no PodGroup: the cluster does not serve one, or gangScheduling is Disabled)")
    lines.append(f"  scheduled {gang}; restartPolicy {job['restartPolicy']}, backoffLimit {job['backoffLimit']}")
    pool = data["pool"]
    lines.append(f"  node pool {pool['name']} ({pool['from']}): nodeSelector {_kv(pool['nodeSelector'])}; "
                 f"tolerations {_tolerations(pool['tolerations'])}; device {pool['deviceResource'] or '-'}")
    return lines


def _pods(data: dict[str, Any]) -> list[str]:
    shown = len(data["pods"])
    total = data["job"]["replicas"]
    title = f"Pods (gang generation 0; {shown} of {total} shown, --all-ranks for every one):" if shown < total \
        else "Pods (gang generation 0):"
    rows = [{**p, "nodeSelector": _kv(p["nodeSelector"]), "tolerations": _tolerations(p["tolerations"]),
             "requests": _kv(p["requests"]), "limits": _kv(p["limits"])} for p in data["pods"]]
    cols = [("name", "name"), ("nodeSelector", "node selector"), ("tolerations", "tolerations"),
            ("requests", "requests"), ("limits", "limits")]
    first = data["pods"][0]
    lines = [title, *("  " + line for line in table(rows, cols).splitlines())]
    lines.append(f"  image {first['image']}; command: {shlex.join(str(a) for a in first['command'])}")
    lines.append(f"  volumes: {', '.join(first['volumes']) or '-'}")
    return lines


def _env(data: dict[str, Any]) -> list[str]:
    env = data["env"]
    lines = ["Environment of container trainer:"]
    if env["common"]:
        lines.append("  on every rank shown:")
        lines += [f"    {k}={v}" for k, v in env["common"].items()]
    if env["perRank"]:
        ranks = [str(r) for r in data["shownRanks"]]
        rows = [{"name": name, **values} for name, values in env["perRank"].items()]
        lines.append("  per rank:")
        lines += ["    " + line for line in table(rows, [("name", "variable"), *((r, f"rank {r}") for r in ranks)])
                  .splitlines()]
    return lines


def _rank_table(data: dict[str, Any]) -> list[str]:
    rt = data["rankTable"]
    if not rt["enabled"]:
        return ["Rank table: disabled (spec.rankTable.format: none)"]
    hccl = f", HCCL {rt['hcclVersion']}" if rt.get("hcclVersion") else ""
    maps = ", ".join(f"{name} ({file})" for file, name in rt["configMaps"].items())
    lines = [f"Rank table: ConfigMap(s) {maps}{hccl} mounted at {rt['mountPath']}, "
             f"RANK_TABLE_FILE={rt['rankTableFile']}"]
    for row in rt["layout"]:
        devices = [d for d in row["devices"] if d is not None]
        on = f" on devices {', '.join(devices)}" if devices else ""
        span = f"{row['ranks'][0]}" if len(row["ranks"]) == 1 else f"{row['ranks'][0]}-{row['ranks'][-1]}"
        lines.append(f"  {row['pod']}: global rank(s) {span}{on}")
    lines.append(f"  ({rt['note']})")
    return lines


def _capacity(data: dict[str, Any]) -> list[str]:
    cap = data["capacity"]
    if not cap["known"]:
        return [f"Capacity: not checked ({cap['note']})"]
    where = f" in one {cap['topologyKey']} domain ({cap['domain']})" if cap.get("topologyKey") else ""
    verdict = "fits now" if cap["fits"] else "does NOT fit now: the gang would wait for room"
    lines = [f"Capacity: {verdict}: room for {cap['room']} rank pod(s){where}, the gang needs {cap['needed']} "
             f"at once; each asks {_kv(cap['request'])}; {cap['eligibleNodes']} node(s) match the pool"]
    busiest = sorted(cap["perNode"].items(), key=lambda kv: -kv[1])[:5]
    if busiest:
        lines.append("  room per node: " + ", ".join(f"{node} {room}" for node, room in busiest)
                     + (" ..." if len(cap["perNode"]) > 5 else ""))
    return lines


def render_explanation(data: dict[str, Any]) -> str:
    sections = [_header(data), _pods(data), _env(data), _rank_table(data), _capacity(data),
                ["No objects were created."]]
    return "\n".join("\n".join(s) for s in sections)
