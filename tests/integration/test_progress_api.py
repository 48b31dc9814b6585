"""Progress and the stall watchdog as the API server serves them: the CRD takes the new runPolicy
fields (defaults applied, bad values refused at apply with the field named) and ``kubectl get dpj``
prints the PROGRESS and ETA columns from the ``status.progress`` the planner writes."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from dpjob_operator.api.progress import ProgressReport
from dpjob_operator.reconcile.progress import progress_status
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


def test_stall_fields_get_their_default_and_bad_values_are_refused_naming_the_field(api, crds, namespace):
    created = dpj.create(api, namespace, JobBuilder("watched").run_policy(stallTimeoutSeconds=60,
                                                                          suspend=True).obj())
    policy = created["spec"]["runPolicy"]
    assert policy["stallTimeoutSeconds"] == 60 and policy["stallPolicy"] == "Restart"
    assert "startupTimeoutSeconds" not in policy, "the startup clock is opt-in"
    for bad, field in [({"stallTimeoutSeconds": 10}, "spec.runPolicy.stallTimeoutSeconds"),
                       ({"startupTimeoutSeconds": 0}, "spec.runPolicy.startupTimeoutSeconds"),
                       ({"stallPolicy": "Sometimes"}, "spec.runPolicy.stallPolicy"),
                       ({"stragglerFactor": 1.0}, "spec.runPolicy.stragglerFactor"),
                       ({"stragglerFactor": 1000}, "spec.runPolicy.stragglerFactor")]:
        out = kubectl("apply", "-n", namespace, "-f", "-", check=False,
                      stdin=json.dumps(JobBuilder("bad").run_policy(**bad).obj()))
        assert out.returncode != 0 and field in out.stderr, (bad, out.stderr)


def test_kubectl_get_prints_progress_and_eta_and_wide_adds_loss(api, crds, namespace):
    """The columns render what the planner writes (progress_status), through the real CRD schema:
    a field the schema does not know would be pruned and the column would stay empty."""
    dpj.create(api, namespace, JobBuilder("columns").run_policy(suspend=True).obj())
    now = datetime.now(UTC)
    t = now.timestamp()
    progress = progress_status(
        ProgressReport(0, t, 420, t - 1, total_steps=1000, loss=0.5, global_samples=13440, checkpoint_step=400,
                       checkpoint_time=t - 30),
        ProgressReport(0, t - 11, 400, t - 11, global_samples=12800), {}, now)
    kubectl("patch", "dpj", "columns", "-n", namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"progress": progress}}))
    stored = dpj.status(api, namespace, "columns")["progress"]
    assert stored == progress, "the schema pruned or changed a progress field"

    header, row = kubectl("get", "dpj", "columns", "-n", namespace).stdout.splitlines()[:2]
    assert header.split()[:8] == ["NAME", "PHASE", "READY", "WORLD", "ACCELERATOR", "RESTARTS", "PROGRESS", "ETA"]
    assert f"420/1000 (42%)   {progress['remaining']}" in row, row
    wide_header, wide_row = kubectl("get", "dpj", "columns", "-n", namespace, "-o", "wide").stdout.splitlines()[:2]
    assert "LOSS" in wide_header and "SAMPLES/S" in wide_header
    assert re.search(r"\s0\.5\s+64$", wide_row), wide_row
