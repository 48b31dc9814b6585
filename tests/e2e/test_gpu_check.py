"""`make gpu-check` cannot rot: the same script runs here on CPU (torchrun, gloo, a tiny
transformer) and must print every row for every precision with ratios that are numbers in a
sane range. About two minutes on 2 cores (nine torchrun launches): a benchmark's own run, so
`make test-bench` runs it, not `make test`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.bench]
pytest.importorskip("torch")

ROWS = ("ours", "bare", "ours-no-metrics", "ours/bare", "ours-no-metrics/bare", "metrics overhead")


def test_the_gpu_check_runs_on_cpu_and_prints_every_row():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), "--device", "cpu",
                           "--window-steps", "5", "--windows", "3", "--warmup-windows", "1"],
                          capture_output=True, text=True, timeout=400, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows: dict[tuple[str, str], str] = {}
    for line in done.stdout.splitlines():
        if line.startswith(("gpu-check:", "precision ")):  # notes and the header
            continue
        precision, rest = line.split(maxsplit=1)
        name, value = rest[:22].strip(), rest[22:].split()[0]
        rows[(precision, name)] = value
    assert set(rows) == {(p, r) for p in ("fp32", "bf16", "fp16") for r in ROWS}, done.stdout
    for precision in ("fp32", "bf16", "fp16"):
        assert all(float(rows[(precision, run)]) > 0 for run in ROWS[:3]), done.stdout
        # Windows of a few steps on a loaded 2-core machine move these by up to 2-3x; a broken
        # timing (a unit mixed up, a window not timed) moves them by orders of magnitude.
        assert 0.05 < float(rows[(precision, "ours/bare")]) < 20, done.stdout
        assert 0.05 < float(rows[(precision, "ours-no-metrics/bare")]) < 20, done.stdout
        assert float(rows[(precision, "metrics overhead")].rstrip("%")) < 95, done.stdout
