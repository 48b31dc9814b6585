"""The side-by-side benchmark cannot rot: a tiny run of bench/compare.py through all four engines
(the raw client, dpjob with and without gang scheduling, the real Kubeflow training-operator)
writes a well-formed table. Not a timed test: the numbers are only checked to exist."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration


@pytest.mark.timeout(900)
def test_a_tiny_comparison_writes_a_table_with_every_engine(cluster, crds, operator, tmp_path):
    operator.stop()  # the benchmark runs its own operator: one per cluster
    try:
        run = subprocess.run([sys.executable, str(REPO / "bench" / "compare.py"), "--sizes", "3", "--reps", "2",
                              "--timeout", "120", "--out", str(tmp_path)],
                             capture_output=True, text=True, timeout=840, cwd=REPO)
    finally:
        operator.start()
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "compare.json").read_text())
    engines = {e["engine"]: e for e in result["summary"]}
    assert set(engines) == {"raw", "dpjob", "dpjob-nogang", "kubeflow"}
    for name, entry in engines.items():
        assert entry["runs"] == 2 and entry["created_s"]["missing"] == entry["running_s"]["missing"] == 0, entry
        assert 0 < entry["created_s"]["median"] <= entry["running_s"]["median"], entry
        if name != "raw":  # an operator did the work: it spent CPU and made API requests
            assert entry["cpu_s"]["median"] > 0 and entry["api_requests"]["median"] > 0, entry
    # The engine order rotates: the first run of each repetition is a different engine.
    firsts = [r["engine"] for r in result["runs"] if r["rep"] == 0][:1] + \
             [r["engine"] for r in result["runs"] if r["rep"] == 1][:1]
    assert firsts[0] != firsts[1]
    table = (tmp_path / "compare.md").read_text().splitlines()
    assert table[2].startswith("| ranks | engine | all created | all Running | created vs raw")
    assert len([line for line in table if line.startswith("| 3 |")]) == 4
    assert result["meta"]["kubeflow"] == {"version": "v1.8.1", "threads": 1, "qps": 20, "burst": 30}
