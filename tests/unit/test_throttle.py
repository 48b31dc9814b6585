"""429 storms: the operator waits what the API server asks (Retry-After), within bounds."""

from __future__ import annotations

import pytest

from dpjob_operator.k8s.ratelimit import MAX_RETRY_AFTER_SECONDS, retry_after

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("status, headers, expected", [
    (429, {"Retry-After": "3"}, 3.0),
    (429, {"retry-after": "0.5"}, 0.5),            # header names are case-insensitive
    (429, {}, 1.0),                                # no header: client-go's 1 s
    (429, {"Retry-After": "Wed, 21 Oct"}, 1.0),    # an HTTP date we do not parse: 1 s
    (429, {"Retry-After": "3600"}, MAX_RETRY_AFTER_SECONDS),  # never parked for an hour
    (500, {"Retry-After": "3"}, None),             # only throttling is retried here
    (409, None, None),
])
def test_retry_after(status, headers, expected):
    assert retry_after(status, headers) == expected


def test_no_client_side_limit_by_default_and_a_positive_qps_caps_requests():
    """The default leaves the rate to API Priority and Fairness (200 jobs at once waited on a 100/s
    bucket, issue 13); an admin's positive apiQPS still caps the operator."""
    from dpjob_operator.config import load_config
    from dpjob_operator.k8s.ratelimit import TokenBucket, limiter

    cfg = load_config(environ={})
    assert cfg.api_qps <= 0 and limiter(cfg.api_qps, cfg.api_burst) is None
    capped = limiter(load_config(environ={"DPJOB_API_QPS": "50", "DPJOB_API_BURST": "5"}).api_qps, 5)
    assert isinstance(capped, TokenBucket) and capped.qps == 50


def test_a_bucket_makes_the_call_after_the_burst_wait():
    from dpjob_operator.k8s.ratelimit import TokenBucket

    now = [0.0]
    slept: list[float] = []
    bucket = TokenBucket(10, 2, clock=lambda: now[0], sleep=slept.append)
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]
    assert slept == [pytest.approx(0.1)]
