"""The node pool's defaultBackend is what a job without spec.backend gets (the chart's pools.*.defaultBackend)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.builders.env import build_rank_env
from tests.support.builders import JobBuilder

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("accelerator, spec_backend, pool_default, expected", [
    ("gpu", None, None, "nccl"),          # out of the box
    ("npu", None, None, "hccl"),
    ("cpu", None, None, "gloo"),
    ("gpu", None, "gloo", "gloo"),        # an admin's pool default is honoured
    ("gpu", "gloo", "nccl", "gloo"),      # the job's own choice wins
])
def test_backend_comes_from_the_job_else_its_pool(accelerator, spec_backend, pool_default, expected):
    builder = JobBuilder().set("accelerator", accelerator)
    if spec_backend:
        builder.set("backend", spec_backend)
    pool = DEFAULT_POOLS[accelerator]
    if pool_default:
        pool = replace(pool, default_backend=pool_default)
    env = dict(build_rank_env(builder.job(), 0, 0, pool))
    assert env["DPJOB_BACKEND"] == expected
