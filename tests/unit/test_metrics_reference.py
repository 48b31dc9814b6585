"""docs/metrics.md lists every metric family the operator and the trainer export, with its type:
read from their live registries, so a metric added to the code and not to the page fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.metric_families import Family, operator_families, trainer_families

pytestmark = pytest.mark.unit
PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented() -> dict[str, str]:
    """metric name -> the type column, from the page's table rows."""
    rows = re.findall(r"^\| `([a-z_:]+)` \| (\w+) \|", PAGE.read_text(), re.MULTILINE)
    return dict(rows)


def exposed_name(family: Family) -> str:
    return family.name + ("_total" if family.kind == "counter" else "")


@pytest.mark.parametrize("family", operator_families() + trainer_families(), ids=exposed_name)
def test_every_exported_metric_is_documented_with_its_type(family):
    assert documented().get(exposed_name(family)) == family.kind, \
        f"docs/metrics.md must list `{exposed_name(family)}` as a {family.kind} ({family.source})"


def test_the_page_lists_nothing_the_code_does_not_export():
    exported = {exposed_name(f) for f in operator_families() + trainer_families()}
    assert set(documented()) - exported == set()


def test_the_operator_series_have_no_per_job_label():
    """Job names are unbounded: one series per job would grow the operator's memory and every scrape."""
    for family in operator_families():
        assert not {"job", "job_name", "name_of_job", "pod"} & set(family.labels), family
