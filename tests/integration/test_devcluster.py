"""Smoke tests of the local control plane: the cluster every other integration test trusts."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.support.cluster import kubectl
from tests.support.kwok import fail_pod
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

GPU_TOLERATION = client.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
NPU_TOLERATION = client.V1Toleration(key="huawei.com/Ascend910", operator="Exists", effect="NoSchedule")


def make_pod(name: str, resources: dict[str, str] | None = None, tolerations=None, annotations=None,
             labels=None, node_selector=None) -> client.V1Pod:
    limits = resources or {}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations, labels=labels),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main", image="busybox",
                                           resources=client.V1ResourceRequirements(limits=limits or None))],
            tolerations=tolerations, node_selector=node_selector, restart_policy="Never",
        ),
    )


def pod_phase(core, ns: str, name: str) -> str:
    return core.read_namespaced_pod(name, ns).status.phase


def node_pool(core, node_name: str) -> str:
    return core.read_node(node_name).metadata.labels.get("dpjob.io/pool", "")


def test_server_reports_a_real_kubernetes_version(cluster):
    out = json.loads(kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"].startswith("v1.3"), out["serverVersion"]
    assert out["clientVersion"]["gitVersion"] == out["serverVersion"]["gitVersion"]


def test_node_pools_have_devices_labels_and_taints(core):
    nodes = core.list_node(label_selector="type=kwok").items
    by_pool: dict[str, list] = {}
    for n in nodes:
        by_pool.setdefault(n.metadata.labels["dpjob.io/pool"], []).append(n)
    assert {p: len(v) for p, v in by_pool.items()} == {"gpu": 4, "npu": 4, "cpu": 2}
    gpu = by_pool["gpu"][0]
    assert gpu.status.allocatable["nvidia.com/gpu"] == "8"
    assert gpu.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in gpu.spec.taints)
    npu = by_pool["npu"][0]
    assert npu.status.allocatable["huawei.com/Ascend910"] == "8"
    assert npu.metadata.labels["accelerator-type"] == "module-910b-8"
    assert all(any(c.type == "Ready" and c.status == "True" for c in n.status.conditions) for n in nodes)


def test_gpu_pod_is_scheduled_on_a_gpu_node_and_runs(core, namespace):
    core.create_namespaced_pod(namespace, make_pod("gpu", {"nvidia.com/gpu": "8"}, [GPU_TOLERATION]))
    wait_until(lambda: pod_phase(core, namespace, "gpu") == "Running", what="gpu pod Running")
    pod = core.read_namespaced_pod("gpu", namespace)
    assert node_pool(core, pod.spec.node_name) == "gpu"
    assert pod.status.pod_ip and pod.status.pod_ip.startswith("10.244.")


def test_untolerating_pods_never_land_on_accelerator_nodes(core, namespace):
    for i in range(6):
        core.create_namespaced_pod(namespace, make_pod(f"plain-{i}"))
    wait_until(lambda: all(pod_phase(core, namespace, f"plain-{i}") == "Running" for i in range(6)),
               what="plain pods Running")
    pools = {node_pool(core, core.read_namespaced_pod(f"plain-{i}", namespace).spec.node_name) for i in range(6)}
    assert pools == {"cpu"}


def test_nine_gpus_stay_pending_unschedulable(core, namespace):
    core.create_namespaced_pod(namespace, make_pod("too-big", {"nvidia.com/gpu": "9"}, [GPU_TOLERATION]))

    def unschedulable():
        conds = core.read_namespaced_pod("too-big", namespace).status.conditions or []
        return next((c for c in conds if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

    cond = wait_until(unschedulable, what="PodScheduled=False/Unschedulable")
    assert "nvidia.com/gpu" in cond.message
    assert pod_phase(core, namespace, "too-big") == "Pending"


def test_deleting_an_owner_garbage_collects_dependents(core, namespace):
    owner = core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner")))
    ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="dependent", owner_references=[ref])))
    core.delete_namespaced_config_map("owner", namespace)
    wait_until(lambda: not any(c.metadata.name == "dependent"
                               for c in core.list_namespaced_config_map(namespace).items), what="dependent collected")


def test_npu_pods_get_the_ascend_device_annotation(core, namespace):
    for i in range(2):
        core.create_namespaced_pod(namespace, make_pod(f"npu-{i}", {"huawei.com/Ascend910": "8"}, [NPU_TOLERATION]))
    key = "ascend.kubectl.kubernetes.io/ascend-910-configuration"

    def annotated():
        pods = [core.read_namespaced_pod(f"npu-{i}", namespace) for i in range(2)]
        return pods if all(key in (p.metadata.annotations or {}) for p in pods) else None

    pods = wait_until(annotated, what="ascend annotation")
    for pod in pods:
        conf = json.loads(pod.metadata.annotations[key])
        assert conf["pod_name"] == pod.metadata.name
        assert len(conf["devices"]) == 8
        assert sorted(int(d["device_id"]) for d in conf["devices"]) == list(range(8))
        assert all(d["device_ip"] not in ("", "-1") for d in conf["devices"])


def test_failure_stage_fails_a_pod_with_the_chosen_exit_code(core, namespace):
    core.create_namespaced_pod(namespace, make_pod(
        "doomed", annotations={"sim.dpjob.io/fail-after": "1s", "sim.dpjob.io/exit-code": "42"}))
    wait_until(lambda: pod_phase(core, namespace, "doomed") == "Failed", what="pod Failed")
    term = core.read_namespaced_pod("doomed", namespace).status.container_statuses[0].state.terminated
    assert term.exit_code == 42


def test_completion_stage_succeeds_a_pod_after_the_delay(core, namespace):
    core.create_namespaced_pod(namespace, make_pod("done", annotations={"sim.dpjob.io/complete-after": "1s"}))
    wait_until(lambda: pod_phase(core, namespace, "done") == "Succeeded", what="pod Succeeded")
    term = core.read_namespaced_pod("done", namespace).status.container_statuses[0].state.terminated
    assert term.exit_code == 0


def test_chaos_label_fails_a_running_pod_on_demand(core, namespace):
    core.create_namespaced_pod(namespace, make_pod("victim"))
    wait_until(lambda: pod_phase(core, namespace, "victim") == "Running", what="victim Running")
    fail_pod(core, namespace, "victim", exit_code=7)
    wait_until(lambda: pod_phase(core, namespace, "victim") == "Failed", what="victim Failed")
    term = core.read_namespaced_pod("victim", namespace).status.container_statuses[0].state.terminated
    assert term.exit_code == 7


def test_the_real_node_is_ready_tainted_and_runs_a_container_pulled_from_the_dev_registry(core, namespace):
    """kubelet + containerd: a pod scheduled there really runs, and `kubectl logs` reads its output."""
    from devcluster import cluster as devcluster
    from devcluster import realnode

    if not devcluster.NODES:
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")
    node = core.read_node(devcluster.NODES[0].name)
    assert node.metadata.labels["dpjob.io/pool"] == realnode.POOL
    assert {(t.key, t.effect) for t in node.spec.taints} == {(realnode.TAINT["key"], "NoSchedule")}
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    assert node.status.node_info.kubelet_version == "v1.36.3"
    image = devcluster.built_images(("operator",))["operator"]
    assert image.startswith("localhost:5000/dpjob/dpjob-operator:dev-operator-"), image  # pulled from the registry
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="hello"),
        spec=client.V1PodSpec(
            restart_policy="Never", node_selector={"dpjob.io/pool": realnode.POOL},
            tolerations=[client.V1Toleration(key=realnode.TAINT["key"], operator="Exists", effect="NoSchedule")],
            containers=[client.V1Container(name="main", image=image, image_pull_policy="IfNotPresent",
                                           command=["python", "-c", "import os; print('hello from', os.getuid())"])]))
    core.create_namespaced_pod(namespace, pod)
    wait_until(lambda: pod_phase(core, namespace, "hello") == "Succeeded", timeout=90, what="the pod to succeed")
    assert kubectl("logs", "-n", namespace, "hello").stdout.strip() == "hello from 65532"
