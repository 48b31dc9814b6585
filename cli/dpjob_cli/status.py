"""Pure: a job's object and its rank pods -> what ``dpjob status`` and ``dpjob list`` show.

The operator already writes the truth into ``status`` (phase, conditions, lastFailure); this module
only arranges it, adds the per-rank view from the pods, and reads training progress from the
trainer's JSON ``step`` lines when the log has them.
"""

from __future__ import annotations

import json
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


def parse_progress(log_text: str) -> dict[str, Any] | None:
    """The last ``{"event": "step", ...}`` line of a trainer log: step, epoch, loss; None without one."""
    for line in reversed(log_text.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "step":
            return {k: event[k] for k in ("step", "epoch", "loss") if k in event}
    return None


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


def status_view(job: dict[str, Any], pods: list[dict[str, Any]], progress: dict[str, Any] | None) -> dict[str, Any]:
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
    if progress:
        view["progress"] = progress
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
    """The columns of ``kubectl get dpj``, plus the namespace."""
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    return {"namespace": meta.get("namespace"), "name": meta["name"], "phase": status.get("phase", "Pending"),
            "ready": status.get("ready", "-"), "world": status.get("worldSize", "-"),
            "accelerator": spec.get("accelerator", "cpu"), "restarts": status.get("restarts", 0),
            "age": age(meta.get("creationTimestamp"), now)}


def _progress_text(progress: dict[str, Any]) -> str:
    parts = [f"{k} {progress[k]:.4f}" if isinstance(progress[k], float) else f"{k} {progress[k]}" for k in progress]
    return ", ".join(parts)


def render_status(view: dict[str, Any]) -> str:
    """``dpjob status`` for people: a summary, the conditions, one row per rank."""
    limit = f"/{view['backoffLimit']}" if view.get("backoffLimit") is not None else ""
    lines = [f"Job {view['name']} (namespace {view['namespace']}): {view['phase']}   ready {view['ready']}   "
             f"world {view.get('worldSize') or '-'}   accelerator {view.get('accelerator') or '-'}   "
             f"restarts {view['restarts']} (charged {view['failureRestarts']}{limit})"]
    if view.get("reason") or view.get("message"):
        lines.append(f"  {view.get('reason') or ''}: {view.get('message') or ''}".rstrip(": "))
    if view.get("progress"):
        lines.append(f"  progress (rank 0): {_progress_text(view['progress'])}")
    last = view.get("lastFailure")
    if last:
        lines.append(f"  last failure: rank {last.get('rank')} ({last.get('pod')}) exit code {last.get('exitCode')}"
                     f" {last.get('reason') or ''} on restart {last.get('restart')}".rstrip())
    if view["conditions"]:
        lines += ["", "Conditions:", *("  " + x for x in table(
            view["conditions"], [("type", "type"), ("status", "status"), ("reason", "reason"),
                                 ("message", "message")]).splitlines())]
    if view["ranks"]:
        lines += ["", "Ranks:", *("  " + x for x in table(
            view["ranks"], [("rank", "rank"), ("pod", "pod"), ("phase", "phase"), ("state", "trainer"),
                            ("node", "node"), ("restart", "gang")]).splitlines())]
    return "\n".join(lines)
