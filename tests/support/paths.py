"""Where things are: the repository, the dev cluster's state directory, its kubeconfig, the examples.

One home for these paths so that fixtures, helpers and benchmarks agree on which cluster they
talk to (``DPJOB_TEST_KUBECONFIG`` points every one of them elsewhere at once).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVCLUSTER = REPO / ".devcluster"
KUBECONFIG = Path(os.environ.get("DPJOB_TEST_KUBECONFIG", DEVCLUSTER / "kubeconfig"))
EXAMPLES = REPO / "examples"


def example_files() -> list[Path]:
    """Every ``examples/*.yaml``, sorted: found by glob so that a new example cannot go untested."""
    return sorted(EXAMPLES.glob("*.yaml"))
