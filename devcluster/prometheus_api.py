"""Prometheus' HTTP API, read as the tests and ``make dev`` read it: instant and range queries, the
loaded configuration and the scrape targets. Standard library only.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping


def _get(url: str, path: str, params: Mapping[str, str], timeout: float) -> dict:
    full = f"{url}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(full, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as e:  # 400/422: bad PromQL; the body says why
        body = json.loads(e.read() or b"{}")
        raise ValueError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}") from None
    if body.get("status") != "success":
        raise ValueError(f"{path} {params}: {body}")
    return body["data"]


def query(url: str, promql: str, time_: float | None = None, timeout: float = 10.0) -> list:
    """Instant query; returns ``data.result`` (a list of {metric, value}; [] when no data).

    Raises ValueError on a PromQL error. A scalar result is returned as a one-element list.
    """
    params = {"query": promql}
    if time_ is not None:
        params["time"] = f"{time_:.3f}"
    data = _get(url, "/api/v1/query", params, timeout)
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": data["result"]}]
    return data["result"]


def query_range(url: str, promql: str, start: float, end: float, step: str = "1s", timeout: float = 10.0) -> list:
    data = _get(url, "/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                              "step": step}, timeout)
    return data["result"]


def config(url: str, timeout: float = 10.0) -> str:
    """The configuration Prometheus has loaded (YAML text), e.g. to see which scrape jobs it runs."""
    return _get(url, "/api/v1/status/config", {}, timeout)["yaml"]


def targets(url: str, timeout: float = 10.0) -> list[dict]:
    """Active scrape targets ({labels, health, lastError, scrapeUrl, ...})."""
    return _get(url, "/api/v1/targets", {"state": "active"}, timeout)["activeTargets"]


def wait_targets_up(url: str, expected: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    active: list[dict] = []
    while time.monotonic() < deadline:
        active = targets(url)
        if sum(t.get("health") == "up" for t in active) >= expected:
            return active
        time.sleep(0.5)
    raise TimeoutError(f"fewer than {expected} targets up after {timeout}s: "
                       f"{[(t.get('scrapeUrl'), t.get('health'), t.get('lastError')) for t in active]}")
