"""Pure: a job's object and its rank pods -> what ``dpjob status``, ``list`` and ``describe`` show.

The operator already writes the truth into ``status`` (phase, conditions, lastFailure, and
``progress`` from rank 0's metrics); this module only arranges it and adds the per-rank view from
the pods. ``list`` shows the columns of ``kubectl get dpj`` (the CRD's printer columns), so the
two never disagree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dpjob_cli.logs import generation_of, rank_of
from dpjob_cli.output import table

TERMINAL_PHASES = ("Succeeded", "Failed")
TRAINER = "trainer"


def is_terminal(job: dict[str, Any]) -> bool:
    return (job.get("status") or {}).get("phase") in TERMINAL_PHASES


def container_state(pod: dict[str, Any]) -> tuple[str, int | None]:
    """(state in words, exit code) of the trainer container: 'running', 'exited 3 (Error)', 'waiting (...)'."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != TRAINER:
            continue
        state = status.get("state") or {}
        if "terminated" in state:
            term = state["terminated"]
            code = term.get("exitCode")
            return f"exited {code} ({term.get('reason') or 'Completed'})", code
        if "running" in state:
            return "running", None
        reason = (state.get("waiting") or {}).get("reason")
        return f"waiting ({reason})" if reason else "waiting", None
    return (pod.get("status") or {}).get("phase", "Pending").lower(), None


def rank_rows(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per rank pod of the newest gang generation, in rank order."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    newest = max((generation_of(p) for p in live), default=0)
    rows = []
    for pod in sorted((p for p in live if generation_of(p) == newest), key=rank_of):
        state, code = container_state(pod)
        rows.append({"rank": rank_of(pod), "pod": pod["metadata"]["name"],
                     "phase": (pod.get("status") or {}).get("phase", "Pending"),
                     "node": (pod.get("spec") or {}).get("nodeName") or "-", "state": state, "exitCode": code,
                     "restart": generation_of(pod)})
    return rows


def failure_summary(job: dict[str, Any]) -> str:
    """Why a job failed, naming the failing rank when the operator recorded one."""
    status = job.get("status") or {}
    last = status.get("lastFailure") or {}
    parts = []
    if last.get("rank") is not None:
        exit_code = f" with exit code {last['exitCode']}" if last.get("exitCode") is not None else ""
        parts.append(f"rank {last['rank']} ({last.get('pod', '?')}) failed{exit_code}"
                     + (f": {last['reason']}" if last.get("reason") else ""))
    message = status.get("message") or ""
    if message and not any(message in p for p in parts):
        parts.append(f"{status.get('reason') or 'Failed'}: {message}")
    return "; ".join(parts) or str(status.get("reason") or "no reason recorded")


def status_view(job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything ``dpjob status`` prints, as data (the shape of ``-o json``)."""
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    view: dict[str, Any] = {
        "name": meta["name"], "namespace": meta.get("namespace"), "phase": status.get("phase", "Pending"),
        "reason": status.get("reason"), "message": status.get("message"),
        "ready": status.get("ready", f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}"),
        "worldSize": status.get("worldSize"), "accelerator": spec.get("accelerator"),
        "restarts": status.get("restarts", 0), "failureRestarts": status.get("failureRestarts", 0),
        "backoffLimit": (spec.get("runPolicy") or {}).get("backoffLimit"),
        "startTime": status.get("startTime"), "completionTime": status.get("completionTime"),
        "lastFailure": status.get("lastFailure"),
        "conditions": [{k: cond.get(k) for k in ("type", "status", "reason", "message")}
                       for cond in status.get("conditions") or []],
        "ranks": rank_rows(pods),
    }
    if status.get("progress"):
        view["progress"] = status["progress"]
    if status.get("kueue"):
        view["kueue"] = status["kueue"]
    return view


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's AGE column: 45s, 12m, 3h, 2d."""
    if not timestamp:
        return "-"
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def list_row(job: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The columns of ``kubectl get dpj`` (``-o wide``: reason, loss, samples/s), plus the namespace."""
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    progress = status.get("progress") or {}
    return {"namespace": meta.get("namespace"), "name": meta["name"], "phase": status.get("phase", "Pending"),
            "ready": status.get("ready", "-"), "world": status.get("worldSize", "-"),
            "accelerator": spec.get("accelerator", "cpu"), "restarts": status.get("restarts", 0),
            "progress": progress.get("summary"), "eta": progress.get("remaining"),
            "age": age(meta.get("creationTimestamp"), now), "reason": status.get("reason"),
            "queue": (status.get("kueue") or {}).get("queue"),
            "loss": progress.get("loss"), "samplesPerSecond": progress.get("samplesPerSecond")}


#: (key, header) of ``kubectl get dpj``'s printer columns, in the CRD's order; WIDE adds the priority-1 ones.
COLUMNS = [("name", "name"), ("phase", "phase"), ("ready", "ready"), ("world", "world"),
           ("accelerator", "accelerator"), ("restarts", "restarts"), ("progress", "progress"), ("eta", "eta"),
           ("age", "age")]
WIDE = [("reason", "reason"), ("queue", "queue"), ("loss", "loss"), ("samplesPerSecond", "samples/s")]


def progress_text(progress: dict[str, Any]) -> str:
    """One line of ``status.progress``: '420/1000 (42%), eta 4m40s, loss 0.25, 3.1 steps/s, slowest rank 3 (1.8x)'."""
    parts = [str(progress.get("summary") or f"step {progress.get('step', '?')}")]
    for key, label in (("remaining", "eta"), ("epoch", "epoch"), ("loss", "loss")):
        if progress.get(key) is not None:
            parts.append(f"{label} {progress[key]}")
    for key, unit in (("stepsPerSecond", "steps/s"), ("samplesPerSecond", "samples/s")):
        if progress.get(key) is not None:
            parts.append(f"{progress[key]} {unit}")
    slow = progress.get("slowestRank")
    if slow:
        parts.append(f"slowest rank {slow.get('rank')} ({slow.get('ratio')}x the median step time)")
    if progress.get("checkpointStep") is not None:
        parts.append(f"checkpoint at step {progress['checkpointStep']}")
    return ", ".join(parts)


def summary_lines(view: dict[str, Any]) -> list[str]:
    """The job in one line, and why it is in its phase."""
    limit = f"/{view['backoffLimit']}" if view.get("backoffLimit") is not None else ""
    lines = [f"Job {view['name']} (namespace {view['namespace']}): {view['phase']}   ready {view['ready']}   "
             f"world {view.get('worldSize') or '-'}   accelerator {view.get('accelerator') or '-'}   "
             f"restarts {view['restarts']} (charged {view['failureRestarts']}{limit})"]
    if view.get("reason") or view.get("message"):
        lines.append(f"  {view.get('reason') or ''}: {view.get('message') or ''}".rstrip(": "))
    if view.get("kueue"):
        lines.append("  kueue: " + kueue_text(view["kueue"]))
    return lines


def kueue_text(kueue: dict[str, Any]) -> str:
    """'LocalQueue team-a, ClusterQueue cq (ResourceFlavors a100), Workload w, evicted 1 time(s)'."""
    parts = [f"LocalQueue {kueue.get('queue') or '-'}"]
    if kueue.get("clusterQueue"):
        flavors = ", ".join(kueue.get("flavors") or []) or "-"
        parts.append(f"ClusterQueue {kueue['clusterQueue']} (ResourceFlavors {flavors})")
    parts.append(f"Workload {kueue.get('workload') or '-'}")
    if kueue.get("evictions"):
        parts.append(f"evicted {kueue['evictions']} time(s)")
    return ", ".join(parts)


def condition_and_rank_tables(view: dict[str, Any], wide: bool = False) -> list[str]:
    """The conditions and one row per rank (``wide``: with exit codes), each under its title."""
    lines: list[str] = []
    if view["conditions"]:
        lines += ["", "Conditions:", *("  " + x for x in table(
            view["conditions"], [("type", "type"), ("status", "status"), ("reason", "reason"),
                                 ("message", "message")]).splitlines())]
    if view["ranks"]:
        columns = [("rank", "rank"), ("pod", "pod"), ("phase", "phase"), ("state", "trainer"), ("node", "node"),
                   ("restart", "gang"), *([("exitCode", "exit")] if wide else [])]
        lines += ["", "Ranks:", *("  " + x for x in table(view["ranks"], columns).splitlines())]
    return lines


def render_status(view: dict[str, Any], wide: bool = False) -> str:
    """``dpjob status`` for people: a summary, progress, the last failure, the conditions, the ranks."""
    lines = summary_lines(view)
    if view.get("progress"):
        lines.append(f"  progress: {progress_text(view['progress'])}")
    last = view.get("lastFailure")
    if last:
        lines.append(f"  last failure: rank {last.get('rank')} ({last.get('pod')}) exit code {last.get('exitCode')}"
                     f" {last.get('reason') or ''} on restart {last.get('restart')}".rstrip())
    return "\n".join(lines + condition_and_rank_tables(view, wide))
