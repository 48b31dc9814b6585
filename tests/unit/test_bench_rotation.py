"""bench/compare.py runs the engines in a rotated order per repetition: none always runs first, on
the coolest cluster, so a warm-up effect never favours one engine's ratio."""

from __future__ import annotations

import pytest

from bench.compare import _rotations

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("reps", "firsts"), [
    (1, ["raw"]),
    (3, ["raw", "dpjob", "kubeflow"]),
    (4, ["raw", "dpjob", "kubeflow", "raw"]),
])
def test_each_repetition_starts_with_the_next_engine_and_runs_every_engine_once(reps, firsts):
    engines = ["raw", "dpjob", "kubeflow"]
    orders = _rotations(engines, reps)
    assert [rep for rep, _ in orders] == list(range(reps))
    assert [order[0] for _, order in orders] == firsts
    assert all(sorted(order) == sorted(engines) for _, order in orders)
