"""The benchmark's reconcile p50/p99 are Prometheus' histogram_quantile over the run's increase."""

from __future__ import annotations

import pytest

from bench.many_jobs import quantile, sizes

pytestmark = pytest.mark.unit
INF = float("inf")
BEFORE = {0.1: 10.0, 0.5: 10.0, 1.0: 10.0, INF: 10.0}  # 10 reconciles before the run, all fast
AFTER = {0.1: 60.0, 0.5: 100.0, 1.0: 110.0, INF: 110.0}  # +50 under 0.1 s, +40 under 0.5 s, +10 under 1 s


@pytest.mark.parametrize(("q", "expected"), [(0.5, 0.1), (0.25, 0.05), (0.9, 0.5), (0.99, 0.95)])
def test_quantiles_interpolate_within_the_bucket_of_the_increase(q, expected):
    assert quantile(q, BEFORE, AFTER) == pytest.approx(expected)


def test_no_reconcile_during_the_run_has_no_quantile_and_inf_answers_the_last_bound():
    assert quantile(0.5, AFTER, AFTER) is None
    assert quantile(0.99, {}, {0.1: 1.0, INF: 10.0}) == 0.1


def test_the_many_jobs_mix_is_2_to_8_ranks():
    mix = sizes(200)
    assert (min(mix), max(mix), len(mix)) == (2, 8, 200)
