"""MindSpore end to end through the operator (issue 16): examples/mindspore-cpu.yaml on the real
node, in containers of trainer-image/Dockerfile.mindspore. The operator's ``framework: mindspore``
environment (MS_SCHED_HOST, MS_SCHED_PORT, MS_WORKER_NUM, MS_LOCAL_WORKER, MS_NODE_RANK) starts one
msrun per pod; rank pod 0's msrun hosts the one scheduler, the other pod's worker reaches it through
cluster DNS, and the two workers train with MindSpore's own CPU collectives (no torch in the image).

Marked ``e2e`` only, not ``mindspore``: it runs in the main venv against the cluster and needs only
the image, which ``stack.trainer_mindspore_image()`` builds (devcluster/images.sh
trainer-mindspore, cached) and imports into the node under the public name the example uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from devcluster import cluster as devcluster
from devcluster import stack
from tests.support import cluster as dpj
from tests.support.cluster import kubectl
from tests.support.paths import EXAMPLES

# The first run on a machine builds the image (pip installs the ~800 MB wheel) inside the fixture.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

EXAMPLE = EXAMPLES / "mindspore-cpu.yaml"
NAME = "mindspore-cpu"
STEPS = 20  # the example's --steps


@pytest.fixture(scope="module", autouse=True)
def real_node(cluster):
    if not devcluster.NODES:
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")


@pytest.fixture(scope="module")
def image() -> str:
    """Built (first time: the ~800 MB wheel, minutes) and imported before any job is created."""
    return stack.trainer_mindspore_image()


def report_dir(namespace: str) -> Path:
    """Where the example's ``--report /tmp/dpjob/$DPJOB_NAMESPACE/$DPJOB_NAME/report`` lands on the
    node: run_on_real_node mounts the node's /tmp/dpjob at the same path."""
    return stack.SHARED_DIR / namespace / NAME / "report"


def test_mindspore_example_trains_through_the_operator_with_one_scheduler_and_identical_ranks(
        api, core, namespace, operator_pod, image):
    doc = yaml.safe_load(EXAMPLE.read_text())
    [container] = doc["spec"]["template"]["spec"]["containers"]
    # The example's public name, pulled through the node's mirror of ghcr.io to the dev registry.
    assert container["image"] == "ghcr.io/dpjob/trainer:mindspore-cpu", container["image"]
    # The example as a user applies it, plus the node's shared directory (the reports reach this
    # host) and the hardened container the other e2e tests use (read-only root, /tmp an emptyDir).
    job = stack.run_on_real_node(doc)
    dpj.create(api, namespace, job)
    st = dpj.wait_phase(api, namespace, NAME, "Succeeded", timeout=420)
    assert st["succeededReplicas"] == 2 and st["restarts"] == 0, st
    # The MindSpore loop serves the progress contract too: PROGRESS and loss in `kubectl get dpj`.
    progress = st.get("progress") or {}
    assert progress.get("summary") == f"{STEPS}/{STEPS} (100%)" and progress.get("loss") is not None, st

    pods = dpj.rank_pods(core, namespace, NAME)
    assert [p.metadata.name for p in pods] == [f"{NAME}-rank-0", f"{NAME}-rank-1"]
    assert {p.spec.node_name for p in pods} <= {n.name for n in devcluster.NODES}, "ranks ran off the real node"
    for rank, pod in enumerate(pods):
        env = dpj.env_of(pod)
        assert (env["MS_WORKER_NUM"], env["MS_LOCAL_WORKER"], env["MS_NODE_RANK"]) == ("2", "1", str(rank))
        assert env["MS_SCHED_HOST"] == f"{NAME}-rank-0.{NAME}.{namespace}.svc.cluster.local"
        assert env["DPJOB_MS_SCHEDULER"] == ("1" if rank == 0 else "0")
        status = pod.status.container_statuses[0]
        assert status.image_id and status.state.terminated.exit_code == 0

    # Exactly one scheduler, in rank pod 0: msrun starts it only where --master_addr is a local address.
    logs = [kubectl("logs", "-n", namespace, p.metadata.name, "-c", "trainer", check=False).stdout for p in pods]
    assert "Start scheduler process" in logs[0], logs[0][-3000:]
    assert "Start scheduler process" not in logs[1], logs[1][-3000:]

    paths = sorted(report_dir(namespace).glob("report-rank*.json"))
    assert [p.name for p in paths] == ["report-rank0.json", "report-rank1.json"], \
        f"reports in {report_dir(namespace)}: {paths}\n{logs[0][-2000:]}\n{logs[1][-2000:]}"
    rank0, rank1 = (json.loads(p.read_text()) for p in paths)

    # (b) one group of two, MindSpore on CPU, different shards.
    for rank, report in enumerate((rank0, rank1)):
        assert report["rank"] == rank and report["world_size"] == 2, report
        assert report["framework"] == "mindspore" and report["backend"] == "mccl"
        assert report["steps"] == STEPS and report["exit_code"] == 0
    assert rank0["step_rows"] and len(rank0["step_rows"]) == len(rank1["step_rows"])
    for step, (rows0, rows1) in enumerate(zip(rank0["step_rows"], rank1["step_rows"], strict=True)):
        assert rows0 and rows1 and not set(rows0) & set(rows1), f"step {step + 1}: the ranks' shards overlap"

    # (a) the same parameters on both ranks after every step, and a new value every step (trained).
    assert len(rank0["param_sha256_steps"]) == STEPS
    assert rank0["param_sha256_steps"] == rank1["param_sha256_steps"], "the ranks' parameters diverged"
    assert len(set(rank0["param_sha256_steps"])) == STEPS
    assert rank0["initial_param_sha256"] == rank1["initial_param_sha256"] != rank0["param_sha256"]
    assert rank0["param_sha256"] == rank1["param_sha256"] == rank0["param_sha256_steps"][-1]
