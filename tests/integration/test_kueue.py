"""DataParallelJobs behind a real Kueue v0.17 (built here, installed from its own chart, with
DataParallelJob among its externalFrameworks): the operator is the job's Kueue integration.

Checked the way Kueue's own e2e suite checks an integration: the Workload the job gets (name,
owner, podSets, queue), no pod before admission, pods placed by the admitted flavor, a second job
waiting for quota until the first is gone, preemption by a higher-priority job (the gang stopped,
not charged, started again after re-admission), a stopped ClusterQueue, and the Workload finished
with the job. Ranks run on the simulated (kwok) cpu pool, which the flavor selects.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import cluster as dpj
from tests.support import kueue as kq
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl
from tests.support.paths import REPO
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration
QUEUE_LABEL, PRIORITY_LABEL = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"


@pytest.fixture()
def queue(api, namespace, kueue) -> Iterator[str]:
    """A ClusterQueue with room for two 1-CPU ranks, and LocalQueue ``team`` in the namespace."""
    name = f"cq-{uuid.uuid4().hex[:8]}"
    kq.create_cluster_scoped(api, "clusterqueues", kq.cluster_queue(name, kq.FLAVOR, cpu="2"))
    kq.local_queue(api, namespace, "team", name)
    yield name
    kq.delete_cluster_scoped(api, "clusterqueues", name)


def queued_job(name: str, queue_name: str = "team", priority: str | None = None, ranks: int = 2,
               builder: JobBuilder | None = None) -> dict[str, Any]:
    body = (builder or JobBuilder(name)).replicas(ranks).requests(cpu="1", memory="1Gi").obj()
    labels = {QUEUE_LABEL: queue_name, **({PRIORITY_LABEL: priority} if priority else {})}
    body["metadata"]["labels"] = labels
    return body


def reason(st: dict[str, Any], kind: str) -> str | None:
    return next((c.get("reason") for c in st.get("conditions") or [] if c["type"] == kind), None)


def test_a_job_waits_for_quota_runs_where_admitted_and_its_workload_finishes_with_it(api, core, namespace,
                                                                                    operator, queue):
    first = dpj.create(api, namespace, queued_job("first"))
    dpj.wait_phase(api, namespace, "first", "Running", timeout=90)
    wl = kq.workload_of(api, namespace, first["metadata"]["uid"])
    assert wl is not None, "the job runs without a Workload"
    assert wl["metadata"]["name"].startswith("dataparalleljob-first-")
    assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == first["metadata"]["uid"]
    assert "kueue.x-k8s.io/resource-in-use" in wl["metadata"]["finalizers"]
    (pod_set,) = wl["spec"]["podSets"]
    assert (wl["spec"]["queueName"], pod_set["name"], pod_set["count"]) == ("team", "main", 2)
    assert pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    assert kq.condition(wl, "Admitted").get("status") == "True"
    pods = dpj.wait_pods(core, namespace, "first", 2)
    for pod in pods:
        assert pod.spec.node_selector.items() >= kq.FLAVOR_NODE_LABELS.items(), "the flavor's node labels"
        assert pod.metadata.labels["kueue.x-k8s.io/podset"] == "main"

    # No room for a second: it waits, says so, and has no pod.
    second = dpj.create(api, namespace, queued_job("second"))
    st = dpj.wait_phase(api, namespace, "second", "Queued", timeout=30)
    assert reason(st, "Admitted") not in (None, "Admitted"), st.get("conditions")
    assert not dpj.rank_pods(core, namespace, "second") and "startTime" not in st
    dpj.wait_event(namespace, "second", "Queued")

    # The first finishes (its ranks deleted with it): the second gets the quota and runs.
    first_workload = wl["metadata"]["name"]
    dpj.delete(api, namespace, "first")
    dpj.wait_phase(api, namespace, "second", "Running", timeout=90)
    wait_until(lambda: all(w["metadata"]["name"] != first_workload for w in kq.workloads(api, namespace)),
               timeout=60, what="the deleted job's Workload released and collected")
    assert kq.workload_of(api, namespace, second["metadata"]["uid"]) is not None


def test_a_higher_priority_job_preempts_a_running_one_which_runs_again_uncharged(api, core, namespace, operator,
                                                                                queue):
    kq.priority_class(api, "dpjob-low", 100)
    kq.priority_class(api, "dpjob-high", 1000)
    low = dpj.create(api, namespace, queued_job("low", priority="dpjob-low"))
    dpj.wait_phase(api, namespace, "low", "Running", timeout=90)
    generation = {p.metadata.labels["dpjob.io/restart"] for p in dpj.wait_pods(core, namespace, "low", 2)}

    dpj.create(api, namespace, queued_job("high", priority="dpjob-high"))
    st = dpj.wait_status(api, namespace, "low", lambda s: reason(s, "Admitted") == "Preempted",
                         timeout=60, what="the low-priority job evicted (Preempted)")
    assert st["phase"] == "Queued" and st.get("failureRestarts", 0) == 0, st
    wait_until(lambda: not dpj.rank_pods(core, namespace, "low"), timeout=60, what="the preempted gang stopped")
    dpj.wait_event(namespace, "low", "Evicted")
    dpj.wait_phase(api, namespace, "high", "Running", timeout=90)
    wl = kq.workload_of(api, namespace, low["metadata"]["uid"])
    assert wl is not None and kq.condition(wl, "QuotaReserved").get("status") == "False"
    assert (wl.get("status") or {}).get("admission") is None, "the preempted Workload still holds its admission"

    dpj.delete(api, namespace, "high")
    st = dpj.wait_phase(api, namespace, "low", "Running", timeout=120)
    assert st.get("failureRestarts", 0) == 0 and st["kueue"]["evictions"] == 1, st
    pods = dpj.wait_pods(core, namespace, "low", 2)
    assert {p.metadata.labels["dpjob.io/restart"] for p in pods} == generation, "an eviction is not a restart"


def test_a_stopped_cluster_queue_stops_a_running_job_and_a_missing_queue_keeps_one_waiting(
        api, core, namespace, operator, queue):
    lost = dpj.create(api, namespace, queued_job("lost", queue_name="nowhere"))
    dpj.create(api, namespace, queued_job("held"))
    dpj.wait_phase(api, namespace, "held", "Running", timeout=90)

    kq.objects(api).patch_cluster_custom_object(kq.GROUP, kq.VERSION, "clusterqueues", queue,
                                                {"spec": {"stopPolicy": "HoldAndDrain"}})
    dpj.wait_status(api, namespace, "held", lambda s: reason(s, "Admitted") == "ClusterQueueStopped",
                    timeout=60, what="the job evicted by the stopped ClusterQueue")
    wait_until(lambda: not dpj.rank_pods(core, namespace, "held"), timeout=60, what="the gang stopped")
    kq.objects(api).patch_cluster_custom_object(kq.GROUP, kq.VERSION, "clusterqueues", queue,
                                                {"spec": {"stopPolicy": "None"}})
    dpj.wait_phase(api, namespace, "held", "Running", timeout=120)

    st = dpj.status(api, namespace, "lost")
    assert st["phase"] == "Queued" and not dpj.rank_pods(core, namespace, "lost"), st
    assert kq.workload_of(api, namespace, lost["metadata"]["uid"]) is not None


def test_a_job_that_succeeds_finishes_its_workload_and_gives_the_quota_back(api, namespace, operator, queue):
    done = dpj.create(api, namespace, queued_job("done", builder=JobBuilder("done").completes_after("2s")))
    dpj.wait_phase(api, namespace, "done", "Succeeded", timeout=90)

    def finished() -> dict[str, Any] | None:
        wl = kq.workload_of(api, namespace, done["metadata"]["uid"])
        ok = wl and kq.condition(wl, "Finished").get("status") == "True" and \
            "kueue.x-k8s.io/resource-in-use" not in (wl["metadata"].get("finalizers") or [])
        return wl if ok else None

    wl = wait_until(finished, timeout=60, what="the Workload Finished and its finalizer dropped")
    assert kq.condition(wl, "Finished")["reason"] == "Succeeded"
    wait_until(lambda: all(total in ("0", "0Gi") for _, total in kq.cluster_queue_usage(api, queue)),
               timeout=60, what="the ClusterQueue's usage back to zero")


def test_the_kueue_examples_apply_as_shipped_and_the_queued_job_is_admitted_to_the_cpu_flavor(
        api, core, namespace, operator, kueue):
    queues, job = REPO / "examples" / "kueue" / "queues.yaml", REPO / "examples" / "kueue" / "queued-cpu.yaml"
    try:
        kubectl("apply", "-n", namespace, "-f", str(queues))
        kubectl("apply", "-n", namespace, "-f", str(job))
        st = dpj.wait_phase(api, namespace, "queued", "Running", timeout=90)
        assert st["kueue"]["queue"] == "team" and st["kueue"]["flavors"] == ["cpu"], st["kueue"]
        assert len(dpj.rank_pods(core, namespace, "queued")) == 2
    finally:
        kubectl("delete", "-n", namespace, "-f", str(job), "--ignore-not-found", "--wait=false", check=False)
        kubectl("delete", "-n", namespace, "-f", str(queues), "--ignore-not-found", "--wait=false", check=False)


def rank_table(core, namespace: str, name: str) -> dict[str, Any]:
    data = core.read_namespaced_config_map(f"{name}-ranktable", namespace).data or {}
    table: dict[str, Any] = json.loads(data.get("ranktable.json", "{}"))
    return table


def test_a_job_readmitted_to_another_flavor_gets_a_rank_table_of_its_new_nodes(api, core, namespace, operator,
                                                                              kueue):
    """Two flavors, one per simulated cpu node: the job admitted to the first is preempted there by a
    higher-priority job and admitted again to the second; its pods and rank table follow."""
    first, second = (f"cq-node-{i}-{namespace[-5:]}" for i in (0, 1))
    cq = f"cq-two-{namespace[-5:]}"
    for flavor, node in ((first, "cpu-node-0"), (second, "cpu-node-1")):
        kq.create_cluster_scoped(api, "resourceflavors", kq.flavor(flavor, {"kubernetes.io/hostname": node}))
    queue = kq.cluster_queue(cq, first, cpu="2")
    group = queue["spec"]["resourceGroups"][0]
    group["flavors"].append({**group["flavors"][0], "name": second})
    # Preempt within the first flavor rather than try the next: the high-priority job takes the
    # low one's place, and the low one, queued again, fits only in the second.
    queue["spec"]["flavorFungibility"] = {"whenCanPreempt": "MayStopSearch"}
    kq.create_cluster_scoped(api, "clusterqueues", queue)
    kq.local_queue(api, namespace, "team", cq)
    kq.priority_class(api, "dpjob-low", 100)
    kq.priority_class(api, "dpjob-high", 1000)
    try:
        dpj.create(api, namespace, queued_job("low", priority="dpjob-low"))
        st = dpj.wait_phase(api, namespace, "low", "Running", timeout=90)
        assert st["kueue"]["flavors"] == [first], st["kueue"]
        table = wait_until(lambda: (t := rank_table(core, namespace, "low")).get("status") == "completed" and t,
                           timeout=60, what="the first rank table")
        assert {s["node"] for s in table["servers"]} == {"cpu-node-0"}

        dpj.create(api, namespace, queued_job("high", priority="dpjob-high"))
        dpj.wait_phase(api, namespace, "high", "Running", timeout=90)
        st = dpj.wait_status(api, namespace, "low", lambda s: s.get("phase") == "Running" and
                             (s.get("kueue") or {}).get("flavors") == [second], timeout=120,
                             what="the low-priority job running again on the second flavor")
        moved = wait_until(lambda: (t := rank_table(core, namespace, "low")).get("status") == "completed" and
                           {s["node"] for s in t["servers"]} == {"cpu-node-1"} and t,
                           timeout=60, what="the rank table rebuilt for the second flavor's node")
        assert {s["uid"] for s in moved["servers"]}.isdisjoint({s["uid"] for s in table["servers"]})
        assert st.get("failureRestarts", 0) == 0
    finally:
        for job in ("low", "high"):
            dpj.delete(api, namespace, job)
        kq.delete_cluster_scoped(api, "clusterqueues", cq)
        for flavor in (first, second):
            kq.delete_cluster_scoped(api, "resourceflavors", flavor)


def test_a_queue_label_changed_before_admission_moves_the_workload(api, core, namespace, operator, queue):
    job = dpj.create(api, namespace, queued_job("moving", queue_name="nowhere"))
    uid = job["metadata"]["uid"]
    waiting = wait_until(lambda: kq.workload_of(api, namespace, uid), timeout=30, what="the Workload in 'nowhere'")
    assert waiting["spec"]["queueName"] == "nowhere"
    assert dpj.wait_phase(api, namespace, "moving", "Queued", timeout=30)

    dpj.patch(api, namespace, "moving", {"metadata": {"labels": {QUEUE_LABEL: "team"}}})
    dpj.wait_phase(api, namespace, "moving", "Running", timeout=90)
    moved = kq.workload_of(api, namespace, uid)
    assert moved is not None and moved["spec"]["queueName"] == "team"
    assert moved["metadata"]["uid"] != waiting["metadata"]["uid"], "the Workload was edited, not replaced"
