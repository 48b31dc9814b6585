"""Progress and the stall watchdog for real: the Helm-installed operator pod reads rank 0's metrics
endpoint in trainer containers on the real node. ``kubectl get dpj`` shows PROGRESS and ETA
moving, a trainer that hangs after step 5 is restarted by the watchdog within its timeout and
resumes from its checkpoint, and a plain user script that serves the documented helper
(docs/api.md, "Progress reporting") reports progress and is failed when it hangs."""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest

from devcluster import cluster as devcluster
from devcluster import stack
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl
from tests.support.progress import hanging_script

pytestmark = pytest.mark.e2e
STALL_TIMEOUT = 30
# How late the watchdog may be beyond stallTimeoutSeconds: it wakes at the deadline itself; the
# rest is a pass, the status write and this test's 0.25 s polling.
STALL_SLACK = 5


@pytest.fixture(scope="module", autouse=True)
def real_node(cluster):
    if not devcluster.NODES:
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")


def real_job(name: str, args: list[str], command: list[str] | None = None, **run_policy) -> dict:
    """Two CPU ranks of the trainer image built here, on the real node."""
    job = (JobBuilder(name).replicas(2).image(stack.trainer_image()).args(args)
           .requests(cpu="300m", memory="512Mi"))
    if command:
        job.command(command)
    if run_policy:
        job.run_policy(**run_policy)
    return stack.run_on_real_node(job.obj())


def workdir(namespace: str, name: str):
    return stack.SHARED_DIR / namespace / name


def _time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _row(namespace: str, name: str, *flags: str) -> tuple[str, str]:
    lines = kubectl("get", "dpj", name, "-n", namespace, *flags).stdout.splitlines()
    return lines[0], lines[1]


def test_progress_and_eta_move_in_status_and_kubectl_get_with_one_write_per_10s(api, namespace, operator_pod):
    name, total = "progress", 20000  # long enough to watch; the test deletes it when done
    dpj.create(api, namespace, real_job(name, ["--task", "mlp", "--steps", str(total), "--log-every", "0"]))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    first = dpj.wait_status(api, namespace, name, lambda st: "remaining" in st.get("progress", {}), timeout=90,
                            what="progress with a measured rate (two reads of rank 0)")["progress"]
    assert first["totalSteps"] == total and first["restart"] == 0 and 0 < first["step"] < total
    assert first["summary"] == f"{first['step']}/{total} ({100 * first['step'] // total}%)"
    assert first["stepsPerSecond"] > 0 and first["samplesPerSecond"] > 0 and first["loss"] > 0
    assert abs(_time(first["lastStepTime"]) - time.time()) < 30

    header, row = _row(namespace, name)
    assert "PROGRESS" in header.split() and "ETA" in header.split()
    assert re.search(rf"\b\d+/{total} \(\d+%\)\s+\d+[smhd]", row), row
    assert "LOSS" in _row(namespace, name, "-o", "wide")[0].split()

    # While steps move: the step goes forward, written at most once per 10 s.
    versions, started = set(), time.monotonic()
    while time.monotonic() - started < 25:
        versions.add(dpj.get(api, namespace, name)["metadata"]["resourceVersion"])
        time.sleep(0.25)
    later = dpj.status(api, namespace, name)["progress"]
    assert later["step"] > first["step"], "the step did not move"
    assert len(versions) <= 4, f"{len(versions)} status writes in 25 s: progress is not throttled"
    dpj.delete(api, namespace, name)


def test_a_trainer_hung_after_step_5_is_restarted_by_the_watchdog_and_resumes_from_its_checkpoint(
        api, namespace, operator_pod):
    name = "hang"
    base = workdir(namespace, name)
    dpj.create(api, namespace, real_job(name, [
        "--task", "mlp", "--steps", "60", "--checkpoint-every", "2", "--checkpoint-dir", f"{base}/ckpt",
        "--report", f"{base}/report", "--hang-after-step", "5"],
        stallTimeoutSeconds=STALL_TIMEOUT, stallPolicy="Restart", backoffLimit=0))
    seen = dpj.wait_status(api, namespace, name, lambda st: st.get("progress", {}).get("step") == 5, timeout=240,
                           what="step 5 in status.progress")
    seen_at = time.monotonic()
    assert seen["phase"] == "Running" and "Stalled" not in {c["type"] for c in seen["conditions"]}
    st = dpj.wait_status(api, namespace, name, lambda st: "lastStall" in st, timeout=STALL_TIMEOUT + 30,
                         what="the watchdog to find the stall")
    assert time.monotonic() - seen_at <= STALL_TIMEOUT + STALL_SLACK
    stall = st["lastStall"]
    assert (stall["reason"], stall["step"], stall["restart"]) == ("Stalled", 5, 0)
    step5_at = re.search(r"since step 5 at (\S+)", stall["message"]).group(1)
    assert STALL_TIMEOUT <= _time(stall["time"]) - _time(step5_at) <= STALL_TIMEOUT + STALL_SLACK, stall
    assert st["restartsByReason"] == {"Stalled": 1} and st["failureRestarts"] == 0, "a stall restart is not charged"
    # Goodput: the stall's cost counts from the last step, and the first gang's startup is known.
    (entry,) = st["goodput"]["restarts"]
    assert (entry["restart"], entry["reason"], entry["strategy"]) == (1, "Stalled", "Recreate"), entry
    assert abs(_time(entry["failedTime"]) - _time(seen["progress"]["lastStepTime"])) <= 1, entry
    assert entry["detectSeconds"] >= STALL_TIMEOUT - 1 and st["goodput"]["startupSeconds"] > 0, st["goodput"]
    dpj.wait_event(namespace, name, "Stalled")

    done = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert done["restarts"] == 1 and done["restartsByReason"] == {"Stalled": 1}
    conds = {c["type"]: c for c in done["conditions"]}
    assert conds["Stalled"]["status"] == "False"
    reports = [p.read_text() for p in sorted((base / "report").glob("report-rank*.json"))]
    assert len(reports) == 2 and all('"resumed_from_step": 4' in r and '"steps": 60' in r for r in reports), \
        "the restarted gang did not resume from the checkpoint of step 4"


def test_a_plain_script_with_the_documented_helper_reports_progress_and_is_failed_when_it_hangs(
        api, namespace, operator_pod):
    name = "script"
    dpj.create(api, namespace, real_job(name, ["-c", hanging_script()], command=["python"],
                                        stallTimeoutSeconds=STALL_TIMEOUT, stallPolicy="Fail"))
    seen = dpj.wait_status(api, namespace, name, lambda st: st.get("progress", {}).get("step") == 5, timeout=240,
                           what="the script's step 5 in status.progress")
    assert seen["progress"]["summary"] == "5/40 (12%)" and seen["progress"]["loss"] == 0.2
    assert "5/40 (12%)" in _row(namespace, name)[1]
    st = dpj.wait_phase(api, namespace, name, "Failed", timeout=STALL_TIMEOUT + 30)
    assert st["reason"] == "Stalled" and st["lastStall"]["step"] == 5 and st["restarts"] == 0
    assert "since step 5" in st["message"]


def test_a_rank_slowed_by_a_sleep_shows_up_as_the_slowest_rank(api, namespace, operator_pod):
    name = "straggler"
    dpj.create(api, namespace, real_job(name, ["--task", "linear", "--steps", "100000", "--log-every", "0",
                                               "--slow-rank", "1", "--slow-seconds", "0.05"],
                                        stragglerFactor=1.5))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    st = dpj.wait_status(api, namespace, name, lambda s: "slowestRank" in s.get("progress", {}), timeout=90,
                         what="status.progress.slowestRank")
    assert st["progress"]["slowestRank"]["rank"] == 1 and st["progress"]["slowestRank"]["ratio"] >= 1.5
    dpj.wait_event(namespace, name, "Straggler")
    dpj.delete(api, namespace, name)
