#!/usr/bin/env python3
"""Generate the chart's Grafana dashboards (helm/dpjob-operator/dashboards/*.json) with
``grafana-foundation-sdk``, the dashboards-as-code SDK that Grafana Labs maintains.

The JSON files are what the chart ships (and what a user can import by hand); the Python beside
this script is their source so that queries are reviewed as PromQL rather than as a 2,000-line JSON
diff. The SDK owns the dashboard model (typed builders generated from Grafana's own schema), the
grid layout and the JSON encoding; the modules here own only what to show:
- ``training_dashboard.py`` and ``operator_dashboard.py``: one dashboard each, one function per row;
- ``panels.py``: panels, rows, variables and the dashboard settings they share (the datasource
  variable every panel and target reads);
- ``promql.py``: the selectors and query shapes (``$__rate_interval`` in every ``rate()``).

``python3 helm/tools/dashboards.py`` rewrites them; ``--check`` fails when they are stale
(tests/unit/test_dashboards.py runs the check).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from operator_dashboard import operator_dashboard
from training_dashboard import training_dashboard

OUT_DIR = Path(__file__).resolve().parent.parent / "dpjob-operator" / "dashboards"
DASHBOARDS: dict[str, Callable[[], dict[str, Any]]] = {"dpjob-training.json": training_dashboard,
                                                       "dpjob-operator.json": operator_dashboard}


def render(build: Callable[[], dict[str, Any]]) -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the JSON files are not up to date")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = OUT_DIR / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    if stale:
        print("stale dashboards (run python3 helm/tools/dashboards.py):", *stale, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
