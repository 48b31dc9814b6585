"""Pure: ``dpjob describe JOB``, everything about one job on one page, like ``kubectl describe``.

The summary, the conditions, the restarts by cause, the last failure with its message (a
traceback's tail), the last stall, the nodes a restarted gang avoids, one row per rank and the
job's events: what a user needs to see why a job waits, failed or restarted.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dpjob_cli.output import table
from dpjob_cli.status import age, condition_and_rank_tables, progress_text, summary_lines


def event_rows(events: list[dict[str, Any]], now: datetime | None = None) -> list[dict[str, Any]]:
    """The columns of ``kubectl describe``'s Events, oldest first."""
    def seen(event: dict[str, Any]) -> str:
        return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")

    rows = []
    for event in sorted(events, key=seen):
        count = int(event.get("count") or 1)
        rows.append({"type": event.get("type"), "reason": event.get("reason"),
                     "age": age(seen(event) or None, now) + (f" (x{count})" if count > 1 else ""),
                     "from": (event.get("source") or {}).get("component") or event.get("reportingComponent"),
                     "message": " ".join(str(event.get("message") or "").split())})
    return rows


def _restarts(view: dict[str, Any]) -> str:
    limit = f"/{view['backoffLimit']}" if view.get("backoffLimit") is not None else ""
    causes = ", ".join(f"{reason} {count}" for reason, count in sorted((view.get("restartsByReason") or {}).items()))
    return f"{view['restarts']} (charged to backoffLimit: {view['failureRestarts']}{limit})" + (
        f"; by cause: {causes}" if causes else "")


def _last_failure(last: dict[str, Any]) -> list[str]:
    where = ", ".join(f"{k} {last[k]}" for k in ("pod", "node", "container") if last.get(k))
    lines = [f"Last failure:   rank {last.get('rank')} ({where}) exit code {last.get('exitCode')} "
             f"{last.get('reason') or ''}, gang {last.get('restart')}, at {last.get('time') or '-'}"]
    return lines + [f"  {line}" for line in str(last.get("message") or "").rstrip().splitlines()[-12:]]


def _details(view: dict[str, Any]) -> list[str]:
    lines = [f"Restarts:       {_restarts(view)}"]
    if view.get("progress"):
        lines.append(f"Progress:       {progress_text(view['progress'])}")
    if view.get("startTime"):
        lines.append(f"Started:        {view['startTime']}"
                     + (f"   completed {view['completionTime']}" if view.get("completionTime") else ""))
    if view.get("lastFailure"):
        lines += _last_failure(view["lastFailure"])
    stall = view.get("lastStall")
    if stall:
        lines.append(f"Last stall:     {stall.get('reason')} at {stall.get('time')}: {stall.get('message') or ''}")
    avoid = view.get("avoidNodes")
    if avoid:
        lines.append(f"Avoided nodes:  {', '.join(avoid.get('nodes') or [])} (gang {avoid.get('restart')}: "
                     f"{avoid.get('reason') or ''})")
    return lines


def render_describe(view: dict[str, Any]) -> str:
    """The summary, the details above, the conditions and ranks, then the events."""
    events = view.get("events") or []
    columns = [("type", "type"), ("reason", "reason"), ("age", "age"), ("from", "from"), ("message", "message")]
    if events:
        tail = ["", "Events:", *("  " + x for x in table(events, columns).splitlines())]
    else:
        tail = ["", f"Events: <{'cannot list them: ' + view['eventsError'] if view.get('eventsError') else 'none'}>"]
    return "\n".join(summary_lines(view) + _details(view) + condition_and_rank_tables(view, wide=True) + tail)
