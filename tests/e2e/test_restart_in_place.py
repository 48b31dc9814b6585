"""Restart in place on the real node: the kubelet restarts every container of a rank pod where it is
(RestartAllContainers); the operator keeps the books. Same pods, same UIDs, no pod created or
deleted, and the gang resumes from its checkpoint."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from devcluster import cluster as devcluster
from tests.support import cluster as dpj
from tests.support.realnode_jobs import container_pids, log_events, reports, trainer_job, training_pids, workdir
from tests.support.waits import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def real_node(cluster):
    if not devcluster.NODES:
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")


def pod_state(core, namespace: str, name: str) -> dict[str, tuple[str, int]]:
    """Per live rank pod: (uid, the trainer's restartCount)."""
    state = {}
    for pod in dpj.rank_pods(core, namespace, name):
        if pod.metadata.deletion_timestamp:
            continue
        trainer = next((cs for cs in pod.status.container_statuses or [] if cs.name == "trainer"), None)
        state[pod.metadata.name] = (pod.metadata.uid, trainer.restart_count if trainer else 0)
    return state


def test_a_sigkilled_rank_restarts_the_gang_in_place_and_it_resumes_from_the_checkpoint(
        api, core, namespace, operator_pod):
    name, steps = "inplace", 600
    base = workdir(namespace, name)
    dpj.create(api, namespace, trainer_job(name, [
        "--task", "mlp", "--steps", str(steps), "--checkpoint-every", "25", "--checkpoint-dir", f"{base}/ckpt",
        "--report", f"{base}/report", "--metrics-port", "0", "--log-every", "25"], backoff_limit=2))
    running = dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    assert running["restartStrategy"] == "InPlace", "Auto did not pick InPlace on a cluster that serves it"
    before = pod_state(core, namespace, name)
    wait_until(lambda: any(Path(f"{base}/ckpt").glob("*")), timeout=120, interval=0.5, what="a checkpoint")
    for pid in wait_until(lambda: container_pids(namespace, name, 1), timeout=30, what="rank 1's trainer"):
        os.kill(pid, signal.SIGKILL)
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert (st["restarts"], st["failureRestarts"], st["restartsByStrategy"]) == (1, 1, {"InPlace": 1})
    assert st["lastFailure"]["rank"] == 1 and st["lastFailure"]["exitCode"] == 137, st["lastFailure"]
    (cost,) = st["goodput"]["restarts"]  # what the restart cost, from the kill (the container's end)
    assert (cost["restart"], cost["strategy"]) == (1, "InPlace"), cost
    ended = st["lastFailure"].get("finishedTime")  # absent when the kubelet's record was replaced unseen
    assert cost["failedTime"] == (ended or cost["failedTime"]) <= st["lastRestart"]["time"], (cost, st["lastFailure"])
    assert 0 <= cost["detectSeconds"] < 60, cost
    after = pod_state(core, namespace, name)
    assert {pod: uid for pod, (uid, _) in after.items()} == {pod: uid for pod, (uid, _) in before.items()}, \
        "a pod was recreated"
    assert all(count == before[pod][1] + 1 for pod, (_, count) in after.items()), (before, after)
    rs = reports(namespace, name)
    assert all(r["steps"] == steps and r["resumed_from_step"] > 0 for r in rs), rs
    assert len({r["param_sha256"] for r in rs}) == 1
    starts = log_events(namespace, f"{name}-rank-1", "start")
    assert starts and starts[-1]["restart_count"] == 1, "the restarted trainer did not see generation 1"


def start_checkpointed(api, core, namespace: str, name: str, steps: int, *extra: str) -> tuple[Path, dict]:
    """A 2-rank mlp job checkpointing every 25 steps, Running with a first checkpoint on disk; (its work
    directory, its pods' state then)."""
    base = workdir(namespace, name)
    dpj.create(api, namespace, trainer_job(name, [
        "--task", "mlp", "--steps", str(steps), "--checkpoint-every", "25", "--checkpoint-dir", f"{base}/ckpt",
        "--report", f"{base}/report", "--log-every", "25", *extra], backoff_limit=2))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    before = pod_state(core, namespace, name)
    wait_until(lambda: any(Path(f"{base}/ckpt").glob("*")), timeout=120, interval=0.5, what="a checkpoint")
    return base, before


def test_a_killed_training_process_is_restarted_warm_inside_its_container(api, core, namespace, operator_pod):
    """Metrics on (the operator reads rank 0): the trainer supervises. Rank 1's training process is
    SIGKILLed; both supervisors fork new ones at once, no container restarts, the gang resumes from
    the checkpoint, and the operator books one warm restart from rank 0's report."""
    name, steps = "warm", 3000
    _, before = start_checkpointed(api, core, namespace, name, steps)
    (worker,) = wait_until(lambda: training_pids(namespace, name, 1), timeout=30, what="rank 1's training process")
    os.kill(worker, signal.SIGKILL)
    booked = dpj.wait_status(api, namespace, name, lambda s: bool((s.get("restartsByStrategy") or {}).get("Warm")),
                             what="a warm restart booked", timeout=120)
    assert booked["lastFailure"]["rank"] == 1 and booked["lastFailure"]["exitCode"] == 137, booked["lastFailure"]
    (cost,) = booked["goodput"]["restarts"]
    assert cost["strategy"] == "Warm" and 0 < cost["recoverSeconds"] < 30, cost
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert (st["restarts"], st["failureRestarts"], st["restartsByStrategy"]) == (0, 1, {"Warm": 1}), st
    assert pod_state(core, namespace, name) == before, "a pod was recreated or a container restarted"
    rs = reports(namespace, name)
    assert all(r["steps"] == steps and r["resumed_from_step"] > 0 for r in rs), rs
    assert len({r["param_sha256"] for r in rs}) == 1
    for rank in (0, 1):
        starts = log_events(namespace, f"{name}-rank-{rank}", "start")
        assert [s["warm_restart"] for s in starts] == [0, 1], starts


def test_ranks_restarted_warm_and_by_the_kubelet_meet_in_the_newest_gang(api, core, namespace, operator_pod):
    """Rank 1's whole container is killed (its supervisor too): the kubelet restarts it in place, while
    rank 0 restarts warm; rank 0 finds the gang moved on, ends, and is restarted by the kubelet too."""
    name = "mixed"
    _, before = start_checkpointed(api, core, namespace, name, 600)
    for pid in wait_until(lambda: container_pids(namespace, name, 1), timeout=30, what="rank 1's trainer"):
        os.kill(pid, signal.SIGKILL)
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert st["restartsByStrategy"] == {"InPlace": 1} and st["restarts"] == 1, st
    after = pod_state(core, namespace, name)
    assert all(after[pod] == (uid, count + 1) for pod, (uid, count) in before.items()), (before, after)
    assert len({r["param_sha256"] for r in reports(namespace, name)}) == 1


PLAIN_DDP = """
import os, sys, torch, torch.distributed as dist
generation = int(open(os.environ["DPJOB_RESTART_COUNT_FILE"]).read())
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if generation == 0 and dist.get_rank() == 1:
    os._exit(9)
dist.barrier()
print("finished at generation", generation, "sum", t.item(), flush=True)
"""


def test_a_plain_torch_ddp_script_without_dpjob_code_is_restarted_in_place_too(api, core, namespace, operator_pod):
    name = "plainddp"
    dpj.create(api, namespace, trainer_job(name, ["-c", PLAIN_DDP], command=["python"], backoff_limit=2))
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=240)
    assert st["restartsByStrategy"] == {"InPlace": 1} and st["restarts"] == 1
    logs = dpj.kubectl("logs", "-n", namespace, f"{name}-rank-0", "-c", "trainer").stdout
    assert "finished at generation 1 sum 2.0" in logs


def test_a_permanent_exit_code_fails_the_job_without_restarting(api, core, namespace, operator_pod):
    name = "permanent"
    job = trainer_job(name, ["-c", "sleep 1; exit 3"], command=["sh"], backoff_limit=3)
    job["spec"]["runPolicy"]["restartPolicy"] = "ExitCode"
    dpj.create(api, namespace, job)
    st = dpj.wait_phase(api, namespace, name, "Failed", timeout=180)
    assert st["reason"] == "PermanentError" and st["restarts"] == 0, st
    assert all(count == 0 for _, count in pod_state(core, namespace, name).values())


def test_the_budget_runs_out_after_backoff_limit_in_place_restarts(api, core, namespace, operator_pod):
    name = "budget"
    dpj.create(api, namespace, trainer_job(name, ["-c", "sleep 5; exit 1"], command=["sh"], backoff_limit=1))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    uids = {pod: uid for pod, (uid, _) in pod_state(core, namespace, name).items()}
    st = dpj.wait_phase(api, namespace, name, "Failed", timeout=180)
    assert st["reason"] == "BackoffLimitExceeded" and st["failureRestarts"] == 1, st
    assert st["restartsByStrategy"] == {"InPlace": 1}
    # sh records no exit: the code is the kubelet's own report when the operator saw it before the restart
    # replaced it, else unknown; never the 137 of the kubelet's in-place kill.
    assert st["lastFailure"]["exitCode"] in (1, -1), st["lastFailure"]
    seen = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, name)}
    assert all(seen.get(pod) in (None, uid) for pod, uid in uids.items()), "a pod was recreated"
