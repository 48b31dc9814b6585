"""The panel queries of the chart's Grafana dashboards, with Grafana's variables expanded as Grafana
would, so a test can run every panel's query on a real Prometheus. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DASHBOARD_DIR = REPO / "helm" / "dpjob-operator" / "dashboards"

# What Grafana would substitute for its built-in interval variables at a 1 s scrape interval.
BUILTINS = {"__rate_interval": "30s", "__interval": "5s", "__range": "5m", "__interval_ms": "5000",
            "__range_s": "300"}

_VAR = re.compile(r"\$(?:\{(\w+)(?::[\w]+)?\}|(\w+))")


def substitute(expr: str, values: Mapping[str, str] | None = None, default: str = ".*") -> str:
    """Expand Grafana variables in a panel query the way Grafana would, for running it on Prometheus.

    ``$var``, ``${var}`` and ``${var:format}`` are replaced by ``values[var]``; built-in interval
    variables (``$__rate_interval`` -> 30s, ``$__interval`` -> 5s, ``$__range`` -> 5m) by
    ``BUILTINS`` unless ``values`` overrides them; any other template variable by ``default``
    (``.*``: the dashboards only use variables inside ``=~`` matchers, so ``.*`` means "All").
    Values are inserted verbatim: pass regex-escaped text if a value has regex metacharacters.
    """
    values = dict(values or {})

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in values:
            return str(values[name])
        if name in BUILTINS:
            return BUILTINS[name]
        return default

    return _VAR.sub(repl, expr)


def _walk_panels(panels: list[dict]) -> Iterable[dict]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels") or [])  # collapsed rows nest their panels


def dashboard_queries(directory: str | Path = DASHBOARD_DIR, values: Mapping[str, str] | None = None,
                      substituted: bool = True) -> list[tuple[str, str, str]]:
    """Every panel query of every dashboard as (dashboard file, panel title, expr).

    With ``substituted`` the Grafana variables are expanded by :func:`substitute` with ``values``
    (e.g. ``{"namespace": ns, "job": job_name}``; unset variables match everything).
    """
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in _walk_panels(dashboard.get("panels") or []):
            for target in panel.get("targets") or []:
                expr = target.get("expr")
                if expr:
                    out.append((path.name, panel.get("title", ""), substitute(expr, values) if substituted else expr))
    return out
