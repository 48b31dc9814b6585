"""What bench/bench_restart.py measures, reduced (pure): the moment a rank stepped again, the median
per ranks and strategy, and the markdown table.

A rank has stepped again when its trainer logged a ``step`` after the ``start`` of the generation
that followed the kill (the trainer's JSON log lines, dpjob_trainer/events.py: every line carries
its wall-clock ``time``; ``start`` carries ``restart_count``, the pod generation the trainer runs,
and ``warm_restart``, its container's warm restarts: their sum counts the restarts since the first
start).
A ``step`` of an older generation (a rank that finished a step before it noticed its peer was gone)
does not count.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from bench.report import median_spread

#: Warm: an InPlace job whose trainer supervises (metrics on), its training process killed; InPlace: the
#: kubelet's restart of every container (the trainer does not supervise); Recreate: new pods.
STRATEGIES = ("Warm", "InPlace", "Recreate")
SLOWEST = "Recreate"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def resumed_at(events: Iterable[Mapping[str, Any]], generation: int) -> float | None:
    """Wall time of the first ``step`` logged after a ``start`` of ``generation`` or later; None if none yet."""
    started = False
    for event in events:
        if event.get("event") == "start":
            started = int(event.get("restart_count", -1)) + int(event.get("warm_restart", 0)) >= generation
        elif started and event.get("event") == "step":
            return float(event["time"])
    return None


def recovery(resumed: Mapping[int, float | None], killed_at: float) -> float | None:
    """Seconds from the kill to the last rank stepping again; None while any rank has not."""
    if not resumed or any(t is None for t in resumed.values()):
        return None
    return round(max(t for t in resumed.values() if t is not None) - killed_at, 3)


def running_again(status: Mapping[str, Any]) -> bool:
    """The job's status once it is Running again with a restart counted (each run restarts once; a
    warm restart moves ``failureRestarts``, not the pod generation)."""
    return status.get("phase") == "Running" and int(status.get("failureRestarts") or 0) >= 1


def writes(calls: Mapping[str, float]) -> float:
    """The requests that changed something (``"PATCH 200"``, ``"POST 201"``...), of ``"METHOD code"`` counts."""
    return sum(v for k, v in calls.items() if k.split(" ", 1)[0] in WRITES)


def _median_calls(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = sorted({k for r in runs for k in r.get("operator_calls") or {}})
    got = {k: statistics.median([(r.get("operator_calls") or {}).get(k, 0.0) for r in runs]) for k in keys}
    return dict(sorted(((k, v) for k, v in got.items() if v > 0), key=lambda kv: -kv[1]))


def summarize(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Per ranks (in the order they ran) and strategy: median and spread of ``key`` (seconds) and of
    the operator's requests (all of them, and its writes), and its median requests by call."""
    out = []
    for ranks in dict.fromkeys(r["ranks"] for r in rows):
        entry: dict[str, Any] = {"ranks": ranks, "seconds": {}, "requests": {}, "writes": {}, "calls": {}, "runs": {}}
        for strategy in STRATEGIES:
            runs = [r for r in rows if r["ranks"] == ranks and r["strategy"] == strategy]
            if not runs:
                continue
            entry["runs"][strategy] = len(runs)
            entry["seconds"][strategy] = median_spread([r.get(key) for r in runs])
            entry["requests"][strategy] = median_spread([r.get("api_requests") for r in runs])
            entry["writes"][strategy] = median_spread(
                [writes(r["operator_calls"]) if "operator_calls" in r else None for r in runs])
            entry["calls"][strategy] = _median_calls(runs)
        out.append(entry)
    return out


def _cell(stat: Mapping[str, Any] | None, digits: int = 2) -> str:
    if not stat or stat["median"] is None:
        return "-"
    text = f"{stat['median']:.{digits}f}"
    if stat["min"] != stat["max"]:
        text += f" ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"
    return text + (f", {stat['missing']} missing" if stat["missing"] else "")


def _ratio(entry: Mapping[str, Any], fast: str) -> str:
    quick, slow = ((entry["seconds"].get(s) or {}).get("median") for s in (fast, SLOWEST))
    return f"{slow / quick:.2f}x" if quick and slow else "-"


FASTER = tuple(s for s in STRATEGIES if s != SLOWEST)
HEADER = ("| ranks | " + " | ".join(f"{s} median s" for s in STRATEGIES) + " | "
          + " | ".join(f"{SLOWEST}/{s}" for s in FASTER)
          + f" | operator API requests per restart {' / '.join(STRATEGIES)} | of which writes |")
CALLS_HEADER = "| ranks | strategy | operator requests by call (median per restart) |"


def _row(entry: Mapping[str, Any]) -> str:
    seconds = " | ".join(_cell(entry["seconds"].get(s)) for s in STRATEGIES)
    ratios = " | ".join(_ratio(entry, s) for s in FASTER)
    requests = " / ".join(_cell(entry["requests"].get(s), 0) for s in STRATEGIES)
    written = " / ".join(_cell(entry["writes"].get(s), 0) for s in STRATEGIES)
    return f"| {entry['ranks']} | {seconds} | {ratios} | {requests} | {written} |"


def markdown(summary: list[dict[str, Any]], caption: str, notes: list[str]) -> str:
    """The table the brief asks for, then the operator's requests by call, then the notes."""
    lines = [caption, "", HEADER, "|" + "---|" * (HEADER.count(" | ") + 1)]
    lines += [_row(entry) for entry in summary]
    lines += ["", CALLS_HEADER, "|---|---|---|"]
    for entry in summary:
        for strategy, calls in entry["calls"].items():
            shown = ", ".join(f"{k}: {v:g}" for k, v in calls.items()) or "-"
            lines.append(f"| {entry['ranks']} | {strategy} | {shown} |")
    lines += [""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"
