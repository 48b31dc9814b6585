"""The side-by-side benchmarks cannot rot: a tiny run of bench/compare.py through all four engines
(the raw client, dpjob with and without gang scheduling, the real Kubeflow training-operator) and
every scenario (one job, many jobs, a gang restart) writes a well-formed table, and so does the pod
shape benchmark. Not timed tests: the numbers are only checked to exist and to be consistent.

Benchmarks, not behaviour: `make test-bench` runs them (about 4 minutes), `make test` does not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.cluster import kubectl
from tests.support.paths import REPO

pytestmark = [pytest.mark.integration, pytest.mark.bench]


@pytest.mark.timeout(900)
def test_a_tiny_comparison_writes_a_table_with_every_engine(cluster, crds, operator, tmp_path):
    operator.stop()  # the benchmark runs its own operator: one per cluster
    try:
        run = subprocess.run([sys.executable, str(REPO / "bench" / "compare.py"), "--sizes", "3", "--reps", "1",
                              "--jobs", "3", "--restart-sizes", "3", "--timeout", "120", "--out", str(tmp_path)],
                             capture_output=True, text=True, timeout=840, cwd=REPO)
    finally:
        operator.start()
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert not kubectl("get", "nodes", "-l", "dpjob.io/bench-node=true", "-o", "name").stdout.strip(), \
        "the benchmark left its kwok nodes behind"
    result = json.loads((tmp_path / "compare.json").read_text())
    for scenario in ("1 job x 3", "3 jobs x 2-8"):
        engines = {e["engine"]: e for e in result["summary"] if e["scenario"] == scenario}
        assert set(engines) == {"raw", "dpjob", "dpjob-nogang", "kubeflow"}, scenario
        for name, entry in engines.items():
            assert entry["runs"] == 1 and entry["created_s"]["missing"] == entry["running_s"]["missing"] == 0, entry
            assert 0 < entry["created_s"]["median"] <= entry["running_s"]["median"], entry
            assert entry["apiserver_requests"]["median"] >= (2 * 3 if scenario.startswith("1 job") else 9), entry
            if name != "raw":  # an operator did the work: it spent CPU, made API requests, reconciled
                assert entry["cpu_s"]["median"] > 0 and entry["api_requests"]["median"] > 0, entry
                if scenario.endswith("jobs x 2-8"):
                    assert entry["reconcile_p50_s"]["median"] <= entry["reconcile_p99_s"]["median"], entry
    assert {e["ranks"] for e in result["summary"] if e["scenario"] == "3 jobs x 2-8"} == {2 + 3 + 4}
    # A gang restart: a whole new gang ran (the clock counts only pods that did not exist before);
    # Kubeflow v1 has no gang restart and is not run.
    restarts = {e["engine"]: e for e in result["summary"] if e["scenario"] == "gang restart x 3"}
    assert set(restarts) == {"raw", "dpjob", "dpjob-nogang"}
    for name, entry in restarts.items():
        assert entry["running_s"]["missing"] == 0 and entry["running_s"]["median"] > 0, entry
        if name != "raw":
            assert entry["api_requests"]["median"] >= 2 * 3, entry  # three deletes, three creates at least
    # (The engine order rotates from one repetition to the next: tests/unit/test_bench_rotation.py.)
    lines = (tmp_path / "compare.md").read_text().splitlines()
    table = lines[:lines.index("", 3)]  # the first table; where the CPU went follows
    assert table[2].startswith("| scenario | engine | all created | all Running | created vs raw")
    assert len([line for line in table if line.startswith("| 1 job x 3 |")]) == 4
    assert len([line for line in table if line.startswith("| 3 jobs x 2-8 |")]) == 4
    assert len([line for line in table if line.startswith("| gang restart x 3 |")]) == 3
    assert any(line.startswith("- idle pass (a 4,096 x 8 Running job") for line in lines)
    cpu = [line for line in lines[len(table):] if line.startswith("| 1 job x 3 |")]
    assert len(cpu) == 4 and all(float(line.split(" | ")[-1].rstrip(" |")) > 0 for line in cpu), cpu
    assert result["meta"]["kubeflow"] == {"version": "v1.8.1", "threads": 1, "qps": 20, "burst": 30}
    assert result["meta"]["dpjob"]["qps"] == "none (APF)"


@pytest.mark.timeout(300)
def test_the_pod_shape_benchmark_runs_every_shape_and_the_inline_environment_is_the_biggest(cluster, tmp_path):
    run = subprocess.run([sys.executable, str(REPO / "bench" / "bench_pod_shape.py"), "--ranks", "3", "--reps", "1",
                          "--timeout", "120", "--out", str(tmp_path)], capture_output=True, text=True, timeout=280,
                         cwd=REPO)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    runs = {r["shape"]: r for r in json.loads((tmp_path / "pod_shape.json").read_text())["runs"]}
    assert set(runs) == {"raw", "dpjob-inline", "dpjob", "dpjob-noenv"}
    assert all(r["running_s"] is not None and r["cpu_kube-apiserver_s"] >= 0 for r in runs.values()), runs
    size = {shape: r["pod_bytes"] for shape, r in runs.items()}
    assert size["raw"] < size["dpjob-noenv"] < size["dpjob"] < size["dpjob-inline"], size
    assert not kubectl("get", "nodes", "-l", "dpjob.io/bench-node=true", "-o", "name").stdout.strip()
