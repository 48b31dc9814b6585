"""The user's side of the progress contract, taken from the docs: tests run exactly the helper that
docs/api.md ("Progress reporting") tells users to copy, so the documented snippet cannot rot."""

from __future__ import annotations

import re

from tests.support.paths import REPO


def documented_helper() -> str:
    """The ``dpjob_progress.py`` helper as docs/api.md shows it."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    return next(b for b in blocks if "def start(" in b and "dpjob_trainer_step" in b)


def hanging_script(total: int = 40, hang_after: int = 5, step_seconds: float = 0.5) -> str:
    """A plain script using the helper: a step every ``step_seconds``, then a hang after step
    ``hang_after`` (no more steps, the metrics endpoint still answers), as a stuck collective looks.
    It prints "hanging after step N" as it stops stepping."""
    return documented_helper() + f"""
start(total_steps={total})
for i in range(1, {total} + 1):
    time.sleep({step_seconds})
    step(i, loss=1.0 / i)
    if i == {hang_after}:
        print(f"hanging after step {{i}}", flush=True)  # the test's signal: no step comes after this line
        while True:
            time.sleep(1)
"""
