"""The comparison's summary (median and spread per scenario and engine) and its markdown table."""

from __future__ import annotations

import statistics
from typing import Any

ENGINES = ("raw", "dpjob", "dpjob-nogang", "kubeflow")
METRICS = ("created_s", "running_s", "cpu_s", "rss_mb", "peak_rss_mb", "api_requests", "apiserver_requests",
           "reconcile_p50_s", "reconcile_p99_s", "api_call_p99_s", "reconcile_passes")
# The store when each run began (bench/measure.py store_state): a bigger one can make a run slower.
STORE = ("etcd_db_mb", "stored_objects")
# CPU seconds of each control-plane process during a run (bench/measure.py RunMeter): where the time went.
PROCESSES = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok")


def median_spread(values: list[float | None]) -> dict[str, float | None]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "min": None, "max": None, "missing": len(values)}
    return {"median": round(statistics.median(got), 3), "min": round(min(got), 3), "max": round(max(got), 3),
            "missing": len(values) - len(got)}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and spread per (scenario, engine), scenarios in the order they ran."""
    out = []
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        for engine in ENGINES:
            runs = [r for r in rows if r["scenario"] == scenario and r["engine"] == engine]
            if not runs:
                continue
            entry: dict[str, Any] = {"scenario": scenario, "ranks": runs[0]["ranks"], "engine": engine,
                                     "runs": len(runs)}
            for key in METRICS + STORE + tuple(f"cpu_{p}_s" for p in PROCESSES):
                if any(key in r for r in runs):
                    entry[key] = median_spread([r.get(key) for r in runs])
            out.append(entry)
    return out


def _cell(entry: dict[str, Any] | None, key: str, digits: int = 2) -> str:
    stat = (entry or {}).get(key)
    if not stat or stat["median"] is None:
        return "-"
    if stat["min"] == stat["max"]:
        return f"{stat['median']:.{digits}f}"
    return f"{stat['median']:.{digits}f} ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"


def _median(entry: dict[str, Any] | None, key: str) -> float | None:
    value: float | None = ((entry or {}).get(key) or {}).get("median")
    return value


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> str:
    x, y = _median(a, key), _median(b, key)
    return f"{x / y:.2f}x" if x and y else "-"


HEADER = ("| scenario | engine | all created | all Running | created vs raw | Running vs raw "
          "| Running: kubeflow / dpjob | operator CPU s | operator RSS MB (peak) | operator API requests "
          "| API server requests (all clients) | reconcile p50 / p99 ms (API call p99), passes |")


def _row(entry: dict[str, Any], same: dict[str, dict[str, Any]]) -> str:
    raw = entry["engine"] == "raw"
    vs_raw = "1.00x" if raw else _ratio(entry, same.get("raw"), "created_s")
    run_vs_raw = "1.00x" if raw else _ratio(entry, same.get("raw"), "running_s")
    kf = ""
    if entry["engine"] == "kubeflow":  # Kubeflow v1 has no gang here (no Volcano): also against dpjob without one
        kf = _ratio(same.get("kubeflow"), same.get("dpjob"), "running_s")
        if same.get("dpjob-nogang"):
            kf += f" ({_ratio(same.get('kubeflow'), same.get('dpjob-nogang'), 'running_s')} no gang)"
    p50, p99 = _median(entry, "reconcile_p50_s"), _median(entry, "reconcile_p99_s")
    latency = f"{p50 * 1000:.0f} / {p99 * 1000:.0f}" if p50 is not None and p99 is not None else "-"
    api = _median(entry, "api_call_p99_s")
    latency += f" ({api * 1000:.0f})" if api is not None else ""
    passes = _median(entry, "reconcile_passes")  # p50/p99 are over passes: fewer no-op passes raise them
    latency += f", {passes:.0f}" if passes is not None else ""
    rss, peak = _median(entry, "rss_mb"), _median(entry, "peak_rss_mb")
    memory = f"{rss:.0f} ({peak:.0f})" if rss is not None and peak is not None else "-"
    return (f"| {entry['scenario']} | {entry['engine']} | {_cell(entry, 'created_s')} | {_cell(entry, 'running_s')} "
            f"| {vs_raw} | {run_vs_raw} | {kf} | {_cell(entry, 'cpu_s')} | {memory} "
            f"| {_cell(entry, 'api_requests', 0)} | {_cell(entry, 'apiserver_requests', 0)} | {latency} |")


CPU_HEADER = ("| scenario | engine | all Running s | operator | " + " | ".join(PROCESSES)
              + " | all of these |")


def _cpu_row(entry: dict[str, Any]) -> str | None:
    """CPU seconds per process during the run; the operator is dpjob's or Kubeflow's, none for raw."""
    cells = [_median(entry, "cpu_s")] + [_median(entry, f"cpu_{p}_s") for p in PROCESSES]
    if all(c is None for c in cells[1:]):
        return None
    shown = " | ".join("-" if c is None else f"{c:.1f}" for c in cells)
    return (f"| {entry['scenario']} | {entry['engine']} | {_cell(entry, 'running_s', 1)} | {shown} "
            f"| {sum(c for c in cells if c is not None):.1f} |")


def _store_note(summary: list[dict[str, Any]]) -> list[str]:
    """The range of the store's size over every run (one line), or nothing if it was not read."""
    stats = {key: [e[key] for e in summary if (e.get(key) or {}).get("median") is not None] for key in STORE}
    if not all(stats.values()):
        return []
    size, objects = ((min(s["min"] for s in stats[k]), max(s["max"] for s in stats[k])) for k in STORE)
    return [f"the store when each run began: etcd database {size[0]:.0f}-{size[1]:.0f} MB, "
            f"{objects[0]:,.0f}-{objects[1]:,.0f} objects (it grows over a session, and a run on a bigger "
            "store can be slower: compare runs of one session, on a store of about the same size)."]


def markdown(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Run {meta['date']} on {meta['machine']}; {meta['reps']} repetitions, engine order rotated; "
             "median (min-max) seconds. dpjob: " + ", ".join(f"{k} {v}" for k, v in meta["dpjob"].items())
             + "; Kubeflow training-operator " + ", ".join(f"{k} {v}" for k, v in meta["kubeflow"].items()) + ".",
             "", HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for entry in summary:
        same = {e["engine"]: e for e in summary if e["scenario"] == entry["scenario"]}
        lines.append(_row(entry, same))
    cpu = [row for row in map(_cpu_row, summary) if row]
    if cpu:
        note = ("Where the CPU went: seconds of CPU per process during the run (median); the machine has "
                f"{meta['machine'].split(', ')[1]}, so CPU seconds near that many times the wall seconds "
                "mean the run was CPU-bound.")
        lines += ["", note, "", CPU_HEADER, "|" + "---|" * (CPU_HEADER.count(" | ") + 1), *cpu]
    lines += [""] + [f"- {note}" for note in meta.get("notes", []) + _store_note(summary)]
    return "\n".join(lines) + "\n"
