"""Status writes are optimistic, on the real API server: a pass that planned from an old view of the
job (or from a deleted job's namesake) cannot overwrite what is there now."""

from __future__ import annotations

import pytest

from dpjob_operator.k8s import errors
from dpjob_operator.k8s.client import KubeClient
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


@pytest.fixture
def kube(api, no_operator):
    """Only this test writes the job's status."""
    return KubeClient(api, qps=50, burst=100)


def test_a_write_from_an_old_view_is_refused_and_the_newer_status_survives(api, namespace, kube):
    seen = dpj.create(api, namespace, JobBuilder("occ", namespace).obj())
    rv = seen["metadata"]["resourceVersion"]
    newer = kube.patch_job_status(namespace, "occ", {"phase": "Running", "message": "the newer pass"}, rv)
    with pytest.raises(errors.ApiError) as refused:
        kube.patch_job_status(namespace, "occ", {"phase": "Pending", "message": "a stale pass"}, rv)
    assert errors.is_conflict(refused.value)
    assert dpj.status(api, namespace, "occ")["message"] == "the newer pass"
    kube.patch_job_status(namespace, "occ", {"message": "planned from the current view"},
                          newer["metadata"]["resourceVersion"])
    assert dpj.status(api, namespace, "occ")["message"] == "planned from the current view"


def test_a_write_meant_for_a_deleted_job_never_lands_on_its_namesake(api, namespace, kube):
    """resourceVersions are etcd revisions, never reused: the old job's one cannot match its namesake."""
    old = dpj.create(api, namespace, JobBuilder("again", namespace).obj())
    dpj.delete(api, namespace, "again")
    dpj.create(api, namespace, JobBuilder("again", namespace).obj())
    with pytest.raises(errors.ApiError) as refused:
        kube.patch_job_status(namespace, "again", {"phase": "Failed"}, old["metadata"]["resourceVersion"])
    assert errors.is_conflict(refused.value)
    assert "phase" not in dpj.status(api, namespace, "again")
