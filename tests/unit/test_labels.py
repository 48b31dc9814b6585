"""Job labels and selectors: every selector finds exactly what the builders labelled."""

from __future__ import annotations

import pytest

from dpjob_operator.api import constants as c
from dpjob_operator.api.labels import (
    MANAGED_POD_SELECTOR,
    generation_labels,
    job_labels,
    pod_selector,
)
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.builders.gang import build_pod_group, build_workload
from dpjob_operator.builders.pods import build_headless_service, build_rank_pod
from tests.support.builders import JobBuilder

pytestmark = pytest.mark.unit


def _matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality and existence terms, the subset of label-selector syntax the operator writes."""
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


def test_selectors_find_every_rank_pod_of_the_job_and_no_other() -> None:
    job, other = JobBuilder("train").job(), JobBuilder("other").job()
    pods = [build_rank_pod(j, i, 0, DEFAULT_POOLS["cpu"]) for j in (job, other) for i in range(2)]
    found = [p["metadata"]["name"] for p in pods if _matches(pod_selector(job), p["metadata"]["labels"])]
    assert found == ["train-rank-0", "train-rank-1"]
    assert all(_matches(MANAGED_POD_SELECTOR, p["metadata"]["labels"]) for p in pods)


@pytest.mark.parametrize(("dns_records", "published"), [
    (None, ["train-rank-0"]),                             # the default: the rendezvous host only
    ("rank0", ["train-rank-0"]),
    ("allRanks", ["train-rank-0", "train-rank-1", "train-rank-2"]),
])
def test_the_headless_service_publishes_the_ranks_the_job_asks_for_and_no_other_jobs(
        dns_records: str | None, published: list[str]) -> None:
    builder = JobBuilder("train")
    if dns_records:
        builder.set("rendezvous", {"dnsRecords": dns_records})
    job, other = builder.job(), JobBuilder("other").job()
    pods = [build_rank_pod(j, i, r, DEFAULT_POOLS["cpu"]) for j in (job, other) for i in range(3) for r in (0, 1)]
    service = build_headless_service(job)["spec"]["selector"]
    by_service = sorted({p["metadata"]["name"] for p in pods if service.items() <= p["metadata"]["labels"].items()})
    assert by_service == published  # every restart generation's pod of that name: the name is what resolves
    assert all(_matches(MANAGED_POD_SELECTOR, p["metadata"]["labels"]) for p in pods)


def test_status_selector_text() -> None:
    expected = "dpjob.io/job-name=train,app.kubernetes.io/managed-by=dpjob-operator"
    assert pod_selector(JobBuilder("train").job()) == expected


def test_gang_objects_carry_the_job_labels() -> None:
    job = JobBuilder("train").job()
    assert build_workload(job)["metadata"]["labels"] == job_labels(job)
    assert build_pod_group(job, 3)["metadata"]["labels"] == generation_labels(job, 3)
    assert generation_labels(job, 3)[c.LABEL_RESTART] == "3"
