"""Preemption by Kueue with real trainers on the real node: a low-priority job that trains and
checkpoints is evicted when a high-priority job needs its quota; its gang stops (not charged to
backoffLimit), the high-priority job runs to the end, and the low-priority job, admitted again,
resumes from its checkpoint and finishes with every rank agreeing on the parameters."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import realnode
from tests.support import cluster as dpj
from tests.support import kueue as kq
from tests.support.realnode_jobs import log_events, reports, trainer_job, workdir
from tests.support.waits import wait_until

pytestmark = pytest.mark.e2e
REAL_FLAVOR = "dpjob-real"


@pytest.fixture()
def real_queue(api, namespace, kueue) -> Iterator[str]:
    """A ResourceFlavor for the real node and a ClusterQueue with room for one 2-rank trainer job
    (2 x 300m CPU), preempting within the queue by priority; LocalQueue ``team``."""
    kq.delete_cluster_scoped(api, "resourceflavors", REAL_FLAVOR)
    kq.create_cluster_scoped(api, "resourceflavors", kq.flavor(
        REAL_FLAVOR, {"dpjob.io/pool": realnode.POOL}, [dict(realnode.TOLERATION)]))
    name = f"cq-{uuid.uuid4().hex[:8]}"
    kq.create_cluster_scoped(api, "clusterqueues", kq.cluster_queue(name, REAL_FLAVOR, cpu="600m", memory="1Gi"))
    kq.local_queue(api, namespace, "team", name)
    kq.priority_class(api, "dpjob-low", 100)
    kq.priority_class(api, "dpjob-high", 1000)
    yield name
    kq.delete_cluster_scoped(api, "clusterqueues", name)
    kq.delete_cluster_scoped(api, "resourceflavors", REAL_FLAVOR)


def queued(job: dict, priority: str) -> dict:
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team", "kueue.x-k8s.io/priority-class": priority}
    return job


def test_a_preempted_job_resumes_from_its_checkpoint_after_the_higher_priority_job(api, core, namespace,
                                                                                  operator, real_queue):
    base, steps = workdir(namespace, "low"), 400
    # Rank 0 holds every step back 50 ms (the trainer's --slow-rank hook): at least 20 s of training,
    # so the preemption lands mid-run whatever this machine's step rate.
    dpj.create(api, namespace, queued(trainer_job("low", [
        "--task", "mlp", "--steps", str(steps), "--checkpoint-every", "20", "--checkpoint-dir", f"{base}/ckpt",
        "--report", f"{base}/report", "--log-every", "50", "--slow-rank", "0", "--slow-seconds", "0.05"],
        backoff_limit=0), "dpjob-low"))
    dpj.wait_phase(api, namespace, "low", "Running", timeout=180)
    wait_until(lambda: any(Path(f"{base}/ckpt").glob("*")), timeout=120, interval=0.5, what="a checkpoint")

    high = workdir(namespace, "high")
    dpj.create(api, namespace, queued(trainer_job("high", [
        "--task", "mlp", "--steps", "40", "--report", f"{high}/report"]), "dpjob-high"))
    st = dpj.wait_status(api, namespace, "low", lambda s: any(
        c["type"] == "Admitted" and c["reason"] == "Preempted" for c in s.get("conditions") or []),
        timeout=60, what="the low-priority job preempted")
    preempted = time.monotonic()
    assert st["phase"] == "Queued" and st.get("failureRestarts", 0) == 0, st
    wait_until(lambda: not dpj.rank_pods(core, namespace, "low"), timeout=60, interval=0.2, what="the gang stopped")
    stopped = time.monotonic() - preempted
    dpj.wait_phase(api, namespace, "high", "Succeeded", timeout=240)
    freed = time.monotonic()

    # Admitted again: the new ranks load the checkpoint and log their start step.
    (resumed, *_) = wait_until(lambda: [e for e in log_events(namespace, "low-rank-0", "start")
                                        if e.get("start_step", 0) > 0], timeout=180, interval=0.5,
                               what="the low-priority job's ranks resumed from the checkpoint")
    print(f"preempted -> gang stopped: {stopped:.1f}s; high-priority job done -> training resumed from step "
          f"{resumed['start_step']}: {time.monotonic() - freed:.1f}s")
    done = dpj.wait_phase(api, namespace, "low", "Succeeded", timeout=300)
    assert done.get("failureRestarts", 0) == 0 and done["kueue"]["evictions"] == 1, done
    rs = reports(namespace, "low")
    assert len(rs) == 2 and all(r["steps"] == steps and r["resumed_from_step"] > 0 for r in rs), rs
    assert len({r["param_sha256"] for r in rs}) == 1, "the ranks disagree after the resume"
