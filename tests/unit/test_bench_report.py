"""The comparison's table: every row has the header's columns, ratios are against the same
scenario's floor, and a run with one repetition shows no fake spread."""

from __future__ import annotations

import pytest

from bench.report import markdown, summarize

pytestmark = pytest.mark.unit

META = {"date": "2026-11-25", "machine": "x86_64, 2 cores", "reps": 2, "dpjob": {"qps": "none (APF)"},
        "kubeflow": {"version": "v1.8.1"}, "notes": ["a note"]}


def _rows() -> list[dict]:
    rows = []
    for rep, (raw, dpjob, kf) in enumerate(((1.0, 1.1, 5.0), (1.2, 1.3, 5.2))):
        rows += [{"scenario": "1 job x 8", "engine": "raw", "ranks": 8, "created_s": raw, "running_s": raw, "rep": rep},
                 {"scenario": "1 job x 8", "engine": "dpjob", "ranks": 8, "created_s": dpjob, "running_s": dpjob * 2,
                  "cpu_s": 0.5, "rss_mb": 100.0, "peak_rss_mb": 120.0, "api_requests": 20, "rep": rep},
                 {"scenario": "1 job x 8", "engine": "dpjob-nogang", "ranks": 8, "created_s": dpjob,
                  "running_s": dpjob * 1.5, "reconcile_p50_s": 0.1, "reconcile_p99_s": 0.9, "api_call_p99_s": 0.4,
                  "reconcile_passes": 40 + rep, "rep": rep},
                 {"scenario": "1 job x 8", "engine": "kubeflow", "ranks": 8, "created_s": kf, "running_s": kf,
                  "rep": rep}]
    rows.append({"scenario": "gang restart x 8", "engine": "dpjob", "ranks": 8, "created_s": 2.0, "running_s": 3.0,
                 "rep": 0})
    return rows


def test_every_row_has_the_headers_columns_and_ratios_use_the_same_scenario():
    table = markdown(summarize(_rows()), META).splitlines()
    rows = [line for line in table if line.startswith("|")]
    assert len({line.count("|") for line in rows}) == 1, rows
    dpjob = next(line for line in rows if line.startswith("| 1 job x 8 | dpjob |")).split(" | ")
    assert dpjob[4] == "1.09x"             # created: 1.2 / 1.1 medians
    assert dpjob[8] == "100 (120)"         # RSS now (peak)
    kubeflow = next(line for line in rows if line.startswith("| 1 job x 8 | kubeflow |")).split(" | ")
    assert kubeflow[6] == "2.12x (2.83x no gang)"  # Running: 5.1 / 2.4, and 5.1 / 1.8 without a gang
    nogang = next(line for line in rows if line.startswith("| 1 job x 8 | dpjob-nogang |")).split(" | ")
    assert nogang[-1] == "100 / 900 (400), 40 |"  # reconcile p50 / p99 ms, the p99 of its API calls, passes
    restart = next(line for line in rows if line.startswith("| gang restart x 8 |")).split(" | ")
    assert restart[2] == "2.00" and restart[4] == "-"  # one run: no spread; no floor in it: no ratio
    assert table[-1] == "- a note"


def test_where_the_cpu_went_sums_the_processes_of_each_run():
    rows = [{"scenario": "1 job x 8", "engine": "dpjob", "ranks": 8, "created_s": 1.0, "running_s": 2.0,
             "cpu_s": 0.5, "cpu_kube-apiserver_s": 1.0, "cpu_etcd_s": 0.25, "cpu_kube-scheduler_s": 0.25,
             "cpu_kwok_s": 0.5, "cpu_kube-controller-manager_s": 0.0, "rep": 0},
            {"scenario": "1 job x 8", "engine": "raw", "ranks": 8, "created_s": 1.0, "running_s": 1.5, "rep": 0}]
    table = markdown(summarize(rows), META).splitlines()
    header = table.index(next(line for line in table if line.startswith("| scenario | engine | all Running s")))
    assert table[header + 2] == "| 1 job x 8 | dpjob | 2.0 | 0.5 | 1.0 | 0.2 | 0.2 | 0.0 | 0.5 | 2.5 |"
    assert not any(line.startswith("| 1 job x 8 | raw | 1.5 |") for line in table)  # nothing measured for it


def test_the_store_each_run_began_on_is_one_line_from_the_smallest_to_the_biggest():
    rows = [{"scenario": "1 job x 8", "engine": engine, "ranks": 8, "created_s": 1.0, "running_s": 1.0, "rep": 0,
             "etcd_db_mb": size, "stored_objects": objects}
            for engine, size, objects in (("raw", 41.7, 3200.0), ("dpjob", 55.2, 12345.0))]
    assert markdown(summarize(rows), META).splitlines()[-1] == (
        "- the store when each run began: etcd database 42-55 MB, 3,200-12,345 objects (it grows over a "
        "session, and a run on a bigger store can be slower: compare runs of one session, on a store of "
        "about the same size).")
    assert not any("the store when" in line for line in markdown(summarize(_rows()), META).splitlines())


def test_the_store_is_read_from_the_api_servers_own_metrics():
    from bench.measure import store_state

    metrics = "\n".join([
        '# TYPE apiserver_storage_size_bytes gauge',
        'apiserver_storage_size_bytes{storage_cluster_id="etcd-0"} 4.194304e+07',
        'apiserver_storage_objects{resource="pods"} 512',
        'apiserver_storage_objects{resource="events"} 88',
        'apiserver_storage_objects{resource="leases.coordination.k8s.io"} -1',
    ])
    assert store_state(metrics) == {"etcd_db_mb": 40.0, "stored_objects": 600.0}
