"""Claims by owner UID on the real control plane (the Kubernetes Job controller's rule): the
operator never adopts a pod it does not control, and a job re-applied under the same name runs
new pods instead of inheriting the old ones' fate."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import wait_pods
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


def _foreign_pod(core, namespace: str, name: str, labels: dict[str, str] | None = None) -> client.V1Pod:
    return core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="registry.k8s.io/pause:3.10")],
                              node_selector={"dpjob.io/pool": "cpu"},
                              tolerations=[client.V1Toleration(operator="Exists")])))


@pytest.mark.parametrize("labelled", [False, True], ids=["plain", "with-our-labels"])
def test_a_foreign_pod_holding_a_rank_name_is_reported_and_never_adopted(api, core, namespace, operator,
                                                                          labelled):
    labels = {"dpjob.io/job-name": "train", "dpjob.io/rank": "0", "dpjob.io/restart": "0",
              "app.kubernetes.io/managed-by": "dpjob-operator"} if labelled else None
    foreign = _foreign_pod(core, namespace, "train-rank-0", labels)
    dpj.create(api, namespace, JobBuilder().obj())

    def conflict() -> dict | None:
        conds = {c["type"]: c for c in dpj.status(api, namespace, "train").get("conditions") or []}
        created = conds.get("Created")
        return created if created and created["reason"] == "PodNameConflict" else None

    cond = wait_until(conflict, timeout=60, what="Created=False/PodNameConflict")
    assert cond["status"] == "False" and "train-rank-0" in cond["message"] and "never adopts" in cond["message"]
    dpj.wait_event(namespace, "train", "PodNameConflict")
    # The status (and so the conflict) is written before the pass creates rank 1: wait for it by listing,
    # as a read would 404 in between (and wait_until lets exceptions through).
    wait_until(lambda: [p for p in dpj.rank_pods(core, namespace, "train") if p.metadata.name == "train-rank-1"],
               timeout=60, what="rank 1 created")
    still = core.read_namespaced_pod("train-rank-0", namespace)
    assert still.metadata.uid == foreign.metadata.uid and not still.metadata.owner_references
    assert dpj.status(api, namespace, "train").get("phase") not in ("Running", "Succeeded", "Failed")


def test_delete_and_reapply_at_once_runs_new_pods(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder().obj())
    dpj.wait_phase(api, namespace, "train", "Running", timeout=90)
    old = {p.metadata.uid for p in dpj.rank_pods(core, namespace, "train")}
    dpj.delete(api, namespace, "train")
    new_job = dpj.create(api, namespace, JobBuilder().obj())  # at once: the old pods still exist
    st = dpj.wait_phase(api, namespace, "train", "Running", timeout=120)
    pods = wait_pods(core, namespace, "train", 2)
    assert {p.metadata.uid for p in pods}.isdisjoint(old)
    assert all(p.metadata.owner_references[0].uid == new_job["metadata"]["uid"] for p in pods)
    assert st["restarts"] == 0 and "lastFailure" not in st


def test_a_job_deleted_and_applied_again_runs_every_time(api, core, namespace, operator):
    """Each time the old job's Service and gang are still being collected while the new job makes
    its own under the same names: a create answered 409 whose object is gone by the read must be
    created again, not taken as made (the new gang had no PodGroup and stayed Pending), and the
    old job's DELETED arriving after the new job's ADDED must not drop the new job."""
    for attempt in range(5):
        job = dpj.create(api, namespace, JobBuilder().obj())
        dpj.wait_phase(api, namespace, "train", "Running", timeout=60)
        pods = wait_pods(core, namespace, "train", 2)
        assert all(p.metadata.owner_references[0].uid == job["metadata"]["uid"] for p in pods), attempt
        dpj.delete(api, namespace, "train")


def _conditions(api, namespace: str, name: str) -> dict[str, dict]:
    return {c["type"]: c for c in dpj.status(api, namespace, name).get("conditions") or []}


def _job_blocked_by_foreign_configmap(api, core, namespace: str, name: str, data: dict, condition: str) -> dict:
    """Someone's ConfigMap ``name`` exists before the job ``train``: wait for ``condition`` to say
    ConfigMapNameConflict, naming it, and return that condition."""
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name),
                                                                    data=data))
    dpj.create(api, namespace, JobBuilder().obj())
    cond = wait_until(lambda: (c := _conditions(api, namespace, "train").get(condition))
                      and c["reason"] == "ConfigMapNameConflict" and c, timeout=60,
                      what=f"{condition}=False/ConfigMapNameConflict")
    assert cond["status"] == "False" and f"ConfigMap {namespace}/{name}" in cond["message"]
    return cond


def test_a_foreign_service_of_the_jobs_name_is_reported_and_never_touched(api, core, namespace, operator):
    foreign = core.create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name="train", labels={"app": "web"}),
        spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80)])))
    dpj.create(api, namespace, JobBuilder().obj())
    cond = wait_until(lambda: (c := _conditions(api, namespace, "train").get("Created"))
                      and c["reason"] == "ServiceNameConflict" and c, timeout=60,
                      what="Created=False/ServiceNameConflict")
    assert cond["status"] == "False" and f"Service {namespace}/train" in cond["message"]
    dpj.wait_event(namespace, "train", "ServiceNameConflict")
    svc = core.read_namespaced_service("train", namespace)
    assert svc.metadata.uid == foreign.metadata.uid and not svc.metadata.owner_references
    assert svc.spec.selector == {"app": "web"}
    assert not dpj.rank_pods(core, namespace, "train"), "ranks would resolve their peers through someone's Service"
    core.delete_namespaced_service("train", namespace)  # the user frees the name: the job goes on
    dpj.wait_phase(api, namespace, "train", "Running", timeout=90)
    assert core.read_namespaced_service("train", namespace).metadata.owner_references[0].kind == "DataParallelJob"


def test_a_foreign_configmap_holding_the_rank_table_name_is_never_patched(api, core, namespace, operator):
    _job_blocked_by_foreign_configmap(api, core, namespace, "train-ranktable", {"mine": "keep"}, "RankTableReady")
    dpj.wait_event(namespace, "train", "ConfigMapNameConflict")
    # One more pass of the job (each fails on the conflict, logs it and backs off): the condition
    # holds, the map is untouched.
    failed = f"reconcile of {namespace}/train failed"
    passes = operator.log_text().count(failed)
    wait_until(lambda: operator.log_text().count(failed) > passes, timeout=90, what="another pass of the job")
    assert _conditions(api, namespace, "train")["RankTableReady"]["reason"] == "ConfigMapNameConflict"
    cm = core.read_namespaced_config_map("train-ranktable", namespace)
    assert cm.data == {"mine": "keep"} and not cm.metadata.owner_references


def test_a_foreign_configmap_holding_the_environment_name_stops_the_ranks_and_is_never_patched(
        api, core, namespace, operator):
    _job_blocked_by_foreign_configmap(api, core, namespace, "train-env", {"WORLD_SIZE": "999"}, "Created")
    assert not dpj.rank_pods(core, namespace, "train"), "ranks would read someone else's WORLD_SIZE"
    cm = core.read_namespaced_config_map("train-env", namespace)
    assert cm.data == {"WORLD_SIZE": "999"} and not cm.metadata.owner_references
    core.delete_namespaced_config_map("train-env", namespace)  # the user frees the name: the job goes on
    dpj.wait_phase(api, namespace, "train", "Running", timeout=90)
    assert {dpj.env_of(p)["WORLD_SIZE"] for p in dpj.rank_pods(core, namespace, "train")} == {"2"}


def test_a_reapplied_job_gets_its_own_service_and_rank_table(api, core, namespace, operator):
    first = dpj.create(api, namespace, JobBuilder().obj())
    dpj.wait_phase(api, namespace, "train", "Running", timeout=90)
    dpj.delete(api, namespace, "train")
    second = dpj.create(api, namespace, JobBuilder().obj())
    dpj.wait_phase(api, namespace, "train", "Running", timeout=120)

    def owned_by_second() -> bool:
        svc = core.read_namespaced_service("train", namespace)
        cm = core.read_namespaced_config_map("train-ranktable", namespace)
        return all((o.metadata.owner_references or [None])[0] is not None
                   and o.metadata.owner_references[0].uid == second["metadata"]["uid"] for o in (svc, cm))

    wait_until(owned_by_second, timeout=90, what="Service and ConfigMap recreated for the new job")
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert json.loads(core.read_namespaced_config_map("train-ranktable", namespace).data["ranktable.json"])
