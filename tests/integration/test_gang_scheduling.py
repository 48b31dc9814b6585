"""Gang scheduling on the real kube-scheduler (Kubernetes' Workload API, GangScheduling gate).

The failure this prevents (anchors section 7, pain point 9): a job that fits only partly grabs
what it can and holds it while its other ranks wait, so no DDP job makes progress. Here two
fresh 8-GPU nodes, tainted so that only this test's jobs land there, make the shortage exact.
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from devcluster import cluster as devcluster
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)
G, V = "scheduling.k8s.io", "v1alpha2"


RACK = "dpjob.io/gang-test-rack"


def _reserve_gpu_nodes(core, namespace: str, count: int):
    """``count`` 8-GPU kwok nodes reserved for one test by a taint and a label; the first half in
    rack a, the rest in rack b. Yields the tag; deletes the test's jobs, then the nodes."""
    if not devcluster.GANG_SCHEDULING:
        pytest.skip("the cluster was brought up with DPJOB_CLUSTER_GANG_SCHEDULING=0")
    tag = uuid.uuid4().hex[:6]
    gpu = next(p for p in devcluster.default_pools() if p.name == "gpu")
    names = []
    for i in range(count):
        node = devcluster.node_manifest(gpu, i)
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = f"gang-{tag}-{i}"
        node["metadata"]["labels"].update({"dpjob.io/gang-test": tag, RACK: "a" if i < count // 2 else "b"})
        node["spec"]["taints"] = [*gpu.taints, {"key": "dpjob.io/gang-test", "value": tag, "effect": "NoSchedule"}]
        core.create_node(node)
        names.append(node["metadata"]["name"])
    wait_until(lambda: all(
        any(c.type == "Ready" and c.status == "True" for c in (core.read_node(n).status.conditions or []))
        for n in names), timeout=60, what="the test's GPU nodes Ready")
    yield tag
    # Jobs first, while kwok still runs the nodes' pods: no pod is left orphaned on a deleted node.
    for job in dpj.list_jobs(core.api_client, namespace):
        dpj.delete(core.api_client, namespace, job["metadata"]["name"])
    wait_until(lambda: not core.list_namespaced_pod(namespace).items, timeout=60, what="the test's pods gone")
    for n in names:
        core.delete_node(n)


@pytest.fixture
def gpu_nodes(core, namespace):
    """Two reserved 8-GPU nodes (one per rack)."""
    yield from _reserve_gpu_nodes(core, namespace, 2)


@pytest.fixture
def gpu_racks(core, namespace):
    """Four reserved 8-GPU nodes: gang-<tag>-0, -1 in rack a; -2, -3 in rack b."""
    yield from _reserve_gpu_nodes(core, namespace, 4)


def gpu_job(name: str, tag: str, replicas: int, gang: str = "Auto", node: int | None = None,
            topology_key: str | None = None) -> dict:
    """``replicas`` ranks of 8 GPUs each, confined to the test's nodes (or to node ``node``)."""
    selector = {"dpjob.io/gang-test": tag}
    if node is not None:
        selector["kubernetes.io/hostname"] = f"gang-{tag}-{node}"
    job = (JobBuilder(name).replicas(replicas).accelerator("gpu").procs(8)
           .run_policy(gangScheduling=gang, backoffLimit=3).image("dpjob/trainer:gpu")
           .node_selector(selector).tolerate("dpjob.io/gang-test", tag))
    if topology_key:
        job.set("placement", {"topologyKey": topology_key})
    return job.obj()


def racks(core, ns: str, name: str) -> list[str]:
    return [core.read_node(n).metadata.labels[RACK] for n in bound(core, ns, name)]


def bound(core, ns: str, name: str) -> list[str]:
    return [p.spec.node_name for p in dpj.rank_pods(core, ns, name)
            if p.spec.node_name and not p.metadata.deletion_timestamp]


def objects(api: client.ApiClient, ns: str, plural: str) -> list[dict]:
    return client.CustomObjectsApi(api).list_namespaced_custom_object(G, V, ns, plural)["items"]


def condition(st: dict, type_: str) -> dict | None:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), None)


def wait_scheduling_verdict(api: client.ApiClient, ns: str, name: str, reason: str) -> dict:
    """The job's status once its PodsScheduled condition gives ``reason``."""
    return dpj.wait_status(api, ns, name, lambda s: (condition(s, "PodsScheduled") or {}).get("reason") == reason,
                           timeout=60, what=f"PodsScheduled=False/{reason}")


def test_a_gang_that_does_not_fit_holds_no_node_and_runs_whole_once_it_fits(api, core, namespace, operator,
                                                                              gpu_nodes):
    dpj.create(api, namespace, gpu_job("holder", gpu_nodes, 1))
    dpj.wait_phase(api, namespace, "holder", "Running")

    # Two ranks, one free node: the scheduler must place neither.
    dpj.create(api, namespace, gpu_job("wide", gpu_nodes, 2))
    st = wait_scheduling_verdict(api, namespace, "wide", "GangUnschedulable")
    msg = condition(st, "PodsScheduled")["message"]
    # Then the scheduler's own words, which vary by scheduling path (placements, nodes, permit waits).
    prefix = "the gang of 2 rank(s) cannot be placed together, so no rank holds a node: "
    assert msg.startswith(prefix) and len(msg) > len(prefix) + 10
    assert st["phase"] in ("Pending", "Created") and st["gang"] == {"podGroup": "wide-gang-0", "minCount": 2}
    assert bound(core, namespace, "wide") == [], "a rank of an unplaceable gang holds a node"
    dpj.wait_event(namespace, "wide", "GangUnschedulable")

    # What the operator made: a Workload for the job, a PodGroup for this gang, pods that name it.
    workloads = {w["metadata"]["name"]: w for w in objects(api, namespace, "workloads")}
    assert workloads["wide"]["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    group = next(g for g in objects(api, namespace, "podgroups") if g["metadata"]["name"] == "wide-gang-0")
    assert group["metadata"]["ownerReferences"][0]["name"] == "wide"
    verdict = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupScheduled")
    assert (verdict["status"], verdict["reason"]) == ("False", "Unschedulable")
    assert {p.spec.scheduling_group.pod_group_name for p in dpj.rank_pods(core, namespace, "wide")} == \
        {"wide-gang-0"}

    # The first job goes away: both ranks are placed together, on both nodes.
    dpj.delete(api, namespace, "holder")
    st = dpj.wait_phase(api, namespace, "wide", "Running", timeout=120)
    assert condition(st, "PodsScheduled")["status"] == "True"
    assert sorted(bound(core, namespace, "wide")) == [f"gang-{gpu_nodes}-0", f"gang-{gpu_nodes}-1"]


def test_without_gang_scheduling_a_job_that_does_not_fit_holds_half_the_nodes(api, core, namespace, operator,
                                                                               gpu_nodes):
    """The contrast, and the per-job opt-out: ranks are placed one by one."""
    dpj.create(api, namespace, gpu_job("holder", gpu_nodes, 1))
    dpj.wait_phase(api, namespace, "holder", "Running")
    dpj.create(api, namespace, gpu_job("greedy", gpu_nodes, 2, gang="Disabled"))
    wait_until(lambda: len(bound(core, namespace, "greedy")) == 1, timeout=60,
               what="one rank of the greedy job bound")
    st = wait_scheduling_verdict(api, namespace, "greedy", "Unschedulable")
    assert "gang" not in st
    assert not [g for g in objects(api, namespace, "podgroups") if g["metadata"]["name"].startswith("greedy")]
    assert all(p.spec.scheduling_group is None for p in dpj.rank_pods(core, namespace, "greedy"))


def test_each_gang_restart_gets_its_own_pod_group_and_a_finished_job_keeps_none(api, core, namespace, operator,
                                                                                 gpu_nodes):
    dpj.create(api, namespace, gpu_job("train", gpu_nodes, 2))
    dpj.wait_phase(api, namespace, "train", "Running")
    victim = dpj.rank_pods(core, namespace, "train")[1].metadata.name
    core.delete_namespaced_pod(victim, namespace)  # a disruption: the whole gang restarts
    st = dpj.wait_status(api, namespace, "train", lambda s: s.get("restarts") == 1 and s.get("phase") == "Running",
                         timeout=90, what="restart 1 running")
    assert st["gang"]["podGroup"] == "train-gang-1"
    wait_until(lambda: [g["metadata"]["name"] for g in objects(
        api, namespace, "podgroups")] == ["train-gang-1"], timeout=60, what="only the current gang's PodGroup")

    # Suspending (Kueue) releases the gang; finishing keeps none either.
    uid = dpj.get(api, namespace, "train")["metadata"]["uid"]
    dpj.patch(api, namespace, "train", {"spec": {"runPolicy": {"suspend": True}}})
    dpj.wait_phase(api, namespace, "train", "Suspended")
    wait_until(lambda: not objects(api, namespace, "podgroups") and not objects(api, namespace, "workloads"),
               timeout=60, what="no PodGroup or Workload while suspended")
    assert uid == dpj.get(api, namespace, "train")["metadata"]["uid"]
    dpj.patch(api, namespace, "train", {"spec": {"runPolicy": {"suspend": False}}})
    st = dpj.wait_phase(api, namespace, "train", "Running", timeout=90)
    assert [g["metadata"]["name"] for g in objects(api, namespace, "podgroups")] == [st["gang"]["podGroup"]]


def test_the_operator_finds_the_gang_api_by_discovery(cluster):
    """What `gangScheduling: auto` decides at start: the API this cluster serves, and one it does not."""
    from dpjob_operator.k8s.client import KubeClient
    from dpjob_operator.k8s.connection import load_api_client

    kube = KubeClient(load_api_client(4), qps=50, burst=50)
    assert kube.serves(G, V, "podgroups") is devcluster.GANG_SCHEDULING
    assert kube.serves(G, "v1alpha9", "podgroups") is False
    assert kube.serves(G, "v1", "podgroups") is False  # served group version, no such resource


def test_a_gang_with_a_topology_key_waits_for_one_rack_instead_of_straddling_two(api, core, namespace, operator,
                                                                                  gpu_racks):
    """Two free nodes, one in each rack: enough GPUs, the wrong shape. The gang must wait."""
    dpj.create(api, namespace, gpu_job("holder-a", gpu_racks, 1, node=1))
    dpj.create(api, namespace, gpu_job("holder-b", gpu_racks, 1, node=2))
    dpj.wait_phase(api, namespace, "holder-a", "Running")
    dpj.wait_phase(api, namespace, "holder-b", "Running")
    dpj.create(api, namespace, gpu_job("wide", gpu_racks, 2, topology_key=RACK))
    st = wait_scheduling_verdict(api, namespace, "wide", "GangUnschedulable")
    assert condition(st, "PodsScheduled")["message"].startswith("the gang of 2 rank(s) cannot be placed together")
    assert bound(core, namespace, "wide") == []
    group = next(g for g in objects(api, namespace, "podgroups") if g["metadata"]["name"] == "wide-gang-0")
    assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}

    dpj.delete(api, namespace, "holder-b")  # rack b has room for the whole gang now
    dpj.wait_phase(api, namespace, "wide", "Running", timeout=120)
    assert racks(core, namespace, "wide") == ["b", "b"]


def test_without_gang_scheduling_a_topology_key_still_keeps_the_ranks_in_one_rack(api, core, namespace, operator,
                                                                                  gpu_racks):
    dpj.create(api, namespace, gpu_job("wide", gpu_racks, 2, gang="Disabled", topology_key=RACK))
    dpj.wait_phase(api, namespace, "wide", "Running")
    assert len(set(racks(core, namespace, "wide"))) == 1
    pod = dpj.rank_pods(core, namespace, "wide")[0]
    term = pod.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution[0]
    assert term.topology_key == RACK and term.label_selector.match_labels == {
        "dpjob.io/job-name": "wide", "dpjob.io/restart": "0"}


def test_a_gang_name_held_by_someone_else_is_reported_and_never_taken(api, core, namespace, operator, gpu_nodes):
    """Claims by controller UID for the gang too: a Workload of the job's name that someone else
    made is neither used nor replaced, and a PodGroup labelled as the job's is not deleted."""
    custom = client.CustomObjectsApi(api)
    gang = {"schedulingPolicy": {"gang": {"minCount": 5}}}
    custom.create_namespaced_custom_object(G, V, namespace, "workloads", {
        "apiVersion": f"{G}/{V}", "kind": "Workload", "metadata": {"name": "taken"},
        "spec": {"podGroupTemplates": [{"name": "ranks", **gang}]}})
    look_alike = {"apiVersion": f"{G}/{V}", "kind": "PodGroup",
                  "metadata": {"name": "other-gang-7", "labels": {"dpjob.io/job-name": "other"}},
                  "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "taken",
                                                                "podGroupTemplateName": "ranks"}}, **gang}}
    custom.create_namespaced_custom_object(G, V, namespace, "podgroups", look_alike)

    dpj.create(api, namespace, gpu_job("taken", gpu_nodes, 1))
    st = dpj.wait_status(api, namespace, "taken", lambda s: (condition(s, "Created") or {}).get(
        "reason") == "GangNameConflict", timeout=60, what="Created=False/GangNameConflict")
    assert "Workload " + namespace + "/taken exists but is not controlled by this job" in condition(
        st, "Created")["message"]
    dpj.wait_event(namespace, "taken", "GangNameConflict")
    assert not dpj.rank_pods(core, namespace, "taken"), "a rank was created into someone else's gang"
    workload = custom.get_namespaced_custom_object(G, V, namespace, "workloads", "taken")
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    assert not workload["metadata"].get("ownerReferences")

    # Another job whose label the look-alike carries runs its gangs and finishes; it is not deleted.
    dpj.create(api, namespace, gpu_job("other", gpu_nodes, 1))
    dpj.wait_phase(api, namespace, "other", "Running", timeout=60)
    names = [g["metadata"]["name"] for g in objects(api, namespace, "podgroups")]
    assert "other-gang-7" in names and "other-gang-0" in names, names
    dpj.delete(api, namespace, "taken")
