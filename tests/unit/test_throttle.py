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
