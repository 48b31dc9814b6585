"""Simulated Ascend device plugin: device scheme, allocation, annotations, and the watch loop."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

DEVCLUSTER = os.path.join(os.path.dirname(__file__), "..", "..", "devcluster")
sys.path.insert(0, os.path.abspath(DEVCLUSTER))

import ascend_device_plugin as plugin  # noqa: E402
import ascend_sim as sim  # noqa: E402

from dpjob_operator.builders.ranktable import (  # noqa: E402
    RankPod,
    RankTableRequest,
    build_rank_tables,
    parse_ascend_device_annotation,
)

pytestmark = pytest.mark.unit

R = sim.DEFAULT_RESOURCE
CONFIG = sim.CONFIG_ANNOTATION_910


# ---------------------------------------------------------------------------------------------
# Builders for API-shaped dicts


def node(name: str = "kwok-npu-3", chips: int | None = 8, ip: str | None = "10.0.1.13", **labels):
    status: dict[str, Any] = {"allocatable": {"cpu": "64"}}
    if chips is not None:
        status["allocatable"][R] = str(chips)
    if ip:
        status["addresses"] = [
            {"type": "Hostname", "address": name},
            {"type": "InternalIP", "address": ip},
        ]
    return {"metadata": {"name": name, "labels": dict(labels)}, "status": status}


def pod(
    name: str = "train-rank-0",
    chips: int | None = 8,
    node_name: str | None = "kwok-npu-3",
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
    host_ip: str | None = None,
) -> dict[str, Any]:
    resources = {} if chips is None else {"limits": {R: str(chips)}, "requests": {R: str(chips)}}
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    status: dict[str, Any] = {"phase": phase}
    if host_ip:
        status["hostIP"] = host_ip
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": uid or f"uid-{name}",
            "resourceVersion": "1",
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": status,
    }


class FakeCluster:
    """read_node / patch_annotations over in-memory dicts; records every patch."""

    def __init__(self, *nodes: dict[str, Any], fail_patches: bool = False) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.patches: list[tuple[str, str, dict[str, str]]] = []
        self.fail_patches = fail_patches
        self.logs: list[str] = []

    def read_node(self, name: str):
        return self.nodes.get(name)

    def patch_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> bool:
        if self.fail_patches:
            return False
        self.patches.append((namespace, name, annotations))
        return True

    def annotator(self) -> sim.Annotator:
        return sim.Annotator(self.read_node, self.patch_annotations, R, log=self.logs.append)


def annotated(p: dict[str, Any], patch: dict[str, str]) -> dict[str, Any]:
    """``p`` as the API returns it after ``patch`` was applied."""
    out = json.loads(json.dumps(p))
    out["metadata"]["annotations"].update(patch)
    return out


def devices_of(annotations: dict[str, str]) -> list[dict[str, str]]:
    return json.loads(annotations[CONFIG])["devices"]


# ---------------------------------------------------------------------------------------------
# Device scheme


@pytest.mark.parametrize(
    ("name", "expected"),
    [("kwok-npu-3", 3), ("npu-0", 0), ("node12", 12), ("worker-9999", 9999)],
)
def test_node_ordinal_from_trailing_number(name: str, expected: int) -> None:
    assert sim.node_ordinal(name) == expected


@pytest.mark.parametrize("name", ["npu-node", "node-123456", "a"])
def test_node_ordinal_falls_back_to_a_stable_hash(name: str) -> None:
    ordinal = sim.node_ordinal(name)
    assert 10000 <= ordinal < 60000
    assert sim.node_ordinal(name) == ordinal


def test_device_ip_and_super_device_id_scheme() -> None:
    assert sim.device_ip(3, 5) == "10.25.0.4"
    assert sim.device_ip(0, 0) == "10.20.0.1"
    assert sim.device_ip(300, 7) == "10.27.1.45"
    assert sim.super_device_id(3, 5) == "306"
    ordinals = [*range(300), sim.node_ordinal("npu-node")]
    ips = {sim.device_ip(o, d) for o in ordinals for d in range(16)}
    sdids = {sim.super_device_id(o, d) for o in ordinals for d in range(16)}
    assert len(ips) == len(sdids) == len(ordinals) * 16


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [{"resources": {"limits": {R: "8"}}}]}, 8),
        ({"containers": [{"resources": {"requests": {R: "2"}}}]}, 2),
        ({"containers": [{"resources": {"limits": {R: 4}, "requests": {R: 4}}}]}, 4),
        (
            {
                "containers": [
                    {"resources": {"limits": {R: "2"}}},
                    {"resources": {"requests": {R: 1}}},
                ]
            },
            3,
        ),
        ({"containers": [{}], "initContainers": [{"resources": {"limits": {R: "4"}}}]}, 4),
        ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}, 0),
        ({"containers": [{"resources": {"limits": {R: "lots"}}}]}, 0),
        ({}, 0),
    ],
)
def test_requested_devices(spec: dict[str, Any], expected: int) -> None:
    assert sim.requested_devices({"spec": spec}, R) == expected


def test_node_capacity_and_internal_ip() -> None:
    assert sim.node_capacity(node(chips=16)) == 16
    assert sim.node_capacity(node(chips=None)) == 0
    assert sim.node_internal_ip(node(ip="10.0.1.13")) == "10.0.1.13"
    assert sim.node_internal_ip(node(ip=None)) is None


def test_annotated_device_ids_reads_either_annotation() -> None:
    config = json.dumps({"devices": [{"device_id": "5"}, {"device_id": "4"}]})
    assert sim.annotated_device_ids(pod(annotations={CONFIG: config})) == (4, 5)
    assert sim.annotated_device_ids(pod(annotations={R: "Ascend910-2,Ascend910-0"})) == (0, 2)
    assert sim.annotated_device_ids(pod()) is None


def test_allocator_hands_out_lowest_free_ids() -> None:
    alloc = sim.DeviceAllocator()
    assert alloc.allocate("n", "a", 2, 8) == (0, 1)
    assert alloc.allocate("n", "b", 3, 8) == (2, 3, 4)
    assert alloc.allocate("other", "c", 8, 8) == tuple(range(8))
    assert alloc.release("a") == (0, 1)
    assert alloc.allocate("n", "d", 3, 8) == (0, 1, 5)
    assert alloc.allocate("n", "e", 3, 8) is None and not alloc.holds("e")
    assert alloc.free("n", 8) == [6, 7]
    alloc.record("n", "b", [7])  # re-recording replaces what b held
    assert alloc.free("n", 8) == [2, 3, 4, 6]


# ---------------------------------------------------------------------------------------------
# Annotation content


def test_annotations_have_the_real_plugin_shape() -> None:
    out = sim.build_pod_annotations(pod(), node(), [1, 0])
    assert out[R] == "Ascend910-0,Ascend910-1"
    assert out[CONFIG] == json.dumps(
        {
            "pod_name": "train-rank-0",
            "server_id": "uid-train-rank-0",
            "host_ip": "10.0.1.13",
            "server_ip": "10.0.1.13",
            "super_pod_id": 0,
            "rack_id": 0,
            "server_index": "3",
            "devices": [
                {"device_id": "0", "device_ip": "10.20.0.4", "super_device_id": "301"},
                {"device_id": "1", "device_ip": "10.21.0.4", "super_device_id": "302"},
            ],
        },
        separators=(",", ":"),
    )


def test_host_ip_falls_back_to_pod_host_ip_and_super_pod_label_is_used() -> None:
    n = node(ip=None, **{sim.SUPER_POD_ID_LABEL: "2"})
    instance = json.loads(sim.build_pod_annotations(pod(host_ip="10.9.9.9"), n, [0])[CONFIG])
    assert (instance["host_ip"], instance["super_pod_id"]) == ("10.9.9.9", 2)


def test_test_switches_force_invalid_device_ip_and_omit_super_device_id() -> None:
    switches = {sim.TEST_DEVICE_IP_ANNOTATION: "-1", sim.TEST_SUPER_DEVICE_ID_ANNOTATION: "omit"}
    devices = devices_of(sim.build_pod_annotations(pod(annotations=switches), node(), [0, 1]))
    assert devices == [{"device_id": "0", "device_ip": "-1"}, {"device_id": "1", "device_ip": "-1"}]


def test_npu_resource_uses_the_npu_annotation_key() -> None:
    out = sim.build_pod_annotations(pod(), node(), [0], resource="huawei.com/npu")
    assert set(out) == {sim.CONFIG_ANNOTATION_NPU, "huawei.com/npu"}
    assert out["huawei.com/npu"] == "npu-0"


# ---------------------------------------------------------------------------------------------
# Annotator decisions


def test_bound_pod_is_annotated_once_and_neighbours_get_the_next_chips() -> None:
    cluster = FakeCluster(node())
    annotator = cluster.annotator()
    first, second = pod("a", chips=4), pod("b", chips=4)

    assert annotator.observe("ADDED", first) == "annotated"
    assert annotator.observe("MODIFIED", first) is None  # stale event from before our patch
    assert annotator.observe("ADDED", second) == "annotated"
    assert [p[1] for p in cluster.patches] == ["a", "b"]
    assert cluster.patches[0][2][R] == "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3"
    assert cluster.patches[1][2][R] == "Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"
    assert annotator.observe("MODIFIED", annotated(first, cluster.patches[0][2])) == "recorded"
    assert len([line for line in cluster.logs if line.startswith("annotated team-a/")]) == 2


@pytest.mark.parametrize(
    "observed",
    [pod(node_name=None), pod(chips=None), pod(chips=0), pod(phase="Succeeded")],
)
def test_pods_that_need_nothing(observed: dict[str, Any]) -> None:
    cluster = FakeCluster(node())
    assert cluster.annotator().observe("ADDED", observed) is None
    assert cluster.patches == []


def test_deleted_and_finished_pods_free_their_chips() -> None:
    cluster = FakeCluster(node(chips=8))
    annotator = cluster.annotator()
    a, b = pod("a", chips=8), pod("b", chips=8)
    assert annotator.observe("ADDED", a) == "annotated"
    assert annotator.observe("ADDED", b) == "skipped"
    assert annotator.observe("DELETED", annotated(a, cluster.patches[0][2])) == "released"
    assert [p[1] for p in cluster.patches] == ["a", "b"]  # b waited for a's chips
    assert annotator.observe("MODIFIED", b) is None
    finished = annotated(b, cluster.patches[1][2]) | {"status": {"phase": "Failed"}}
    assert annotator.observe("MODIFIED", finished) == "released"
    assert annotator.allocator.free("kwok-npu-3", 8) == list(range(8))


def test_pod_waiting_for_chips_is_retried_when_its_node_frees_some() -> None:
    cluster = FakeCluster(node(chips=8), node("kwok-npu-4", chips=8))
    annotator = cluster.annotator()
    old = pod("old", chips=8)
    assert annotator.observe("ADDED", old) == "annotated"
    assert annotator.observe("ADDED", pod("elsewhere", chips=8, node_name="kwok-npu-4"))
    assert annotator.observe("ADDED", pod("new", chips=8)) == "skipped"
    assert annotator.observe("DELETED", pod("gone-elsewhere", node_name="kwok-npu-4")) is None
    assert [p[1] for p in cluster.patches] == ["old", "elsewhere"]
    assert annotator.observe("DELETED", old) == "released"
    assert [p[1] for p in cluster.patches] == ["old", "elsewhere", "new"]
    assert cluster.patches[-1][2][R].startswith("Ascend910-0,")


def test_skips_are_logged_once_per_pod() -> None:
    cluster = FakeCluster(node("kwok-cpu-0", chips=None), node(chips=2))
    annotator = cluster.annotator()
    for _ in range(3):
        assert annotator.observe("MODIFIED", pod("c", node_name="kwok-cpu-0")) == "skipped"
        assert annotator.observe("MODIFIED", pod("big", chips=4)) == "skipped"
        assert annotator.observe("MODIFIED", pod("lost", node_name="gone-1")) == "skipped"
    assert cluster.logs == [
        f"skip team-a/c: node kwok-cpu-0 has no allocatable {R}",
        f"skip team-a/big: wants 4 {R}, node kwok-npu-3 has 2 free",
        "skip team-a/lost: node gone-1 not found",
    ]


def test_failed_patch_releases_the_chips() -> None:
    cluster = FakeCluster(node(), fail_patches=True)
    annotator = cluster.annotator()
    assert annotator.observe("ADDED", pod("a")) == "skipped"
    assert annotator.allocator.free("kwok-npu-3", 8) == list(range(8))


def test_sync_rebuilds_allocation_from_annotated_pods_in_any_order() -> None:
    cluster = FakeCluster(node())
    held = pod("old", chips=4, annotations={R: "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3"})
    fresh = pod("new", chips=4)
    actions = cluster.annotator().sync([fresh, held])
    assert actions == ["annotated", "recorded"]
    assert cluster.patches[0][2][R] == "Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"


def test_plugin_annotations_make_a_completed_hccl_table() -> None:
    cluster = FakeCluster(node("kwok-npu-0", ip="10.0.1.10"), node("kwok-npu-1", ip="10.0.1.11"))
    annotator = cluster.annotator()
    rank_pods = []
    for index in range(2):
        p = pod(f"train-rank-{index}", chips=8, node_name=f"kwok-npu-{index}")
        assert annotator.observe("ADDED", p) == "annotated"
        annotations = cluster.patches[-1][2]
        parsed = parse_ascend_device_annotation(annotations[CONFIG])
        assert parsed.server_id == p["metadata"]["uid"] and len(parsed.devices) == 8
        rank_pods.append(
            RankPod(index, p["metadata"]["name"], p["metadata"]["uid"], f"kwok-npu-{index}",
                    f"10.244.{index}.2", f"10.0.1.1{index}", annotations)
        )
    req = RankTableRequest("train", "team-a", 0, "npu", 2, 8, "auto", super_pod_size=16)
    result = build_rank_tables(req, rank_pods)
    assert result.ready and result.version == "1.2"
    table = json.loads(result.files["hccl.json"])
    assert table["server_list"][1]["device"][0] == {
        "device_id": "0", "super_device_id": "101", "device_ip": "10.20.0.2", "rank_id": "8",
    }  # fmt: skip


def test_invalid_switch_reaches_the_operator_as_invalid_device_annotation() -> None:
    cluster = FakeCluster(node("kwok-npu-0"))
    p = pod("train-rank-0", chips=2, node_name="kwok-npu-0",
            annotations={sim.TEST_DEVICE_IP_ANNOTATION: "-1"})  # fmt: skip
    cluster.annotator().observe("ADDED", p)
    rank_pod = RankPod(0, "train-rank-0", "u", "kwok-npu-0", "10.244.0.2", "10.0.1.10",
                       cluster.patches[0][2])  # fmt: skip
    req = RankTableRequest("train", "team-a", 0, "npu", 1, 2, "auto")
    result = build_rank_tables(req, [rank_pod])
    assert result.reason == "InvalidDeviceAnnotation" and "device 0" in result.message


# ---------------------------------------------------------------------------------------------
# Watch loop (fake API; the real one is exercised against the local cluster)


class FakeApi(FakeCluster):
    """Scripted list/watch: each watch call pops the next script entry."""

    def __init__(self, lists: list[list[dict]], watches: list[Any]) -> None:
        super().__init__(node("kwok-npu-0"), node("kwok-npu-1"))
        self.lists = lists
        self.watches = watches
        self.calls: list[str] = []

    def list_pods(self):
        self.calls.append("list")
        return self.lists.pop(0), f"rv{len(self.calls)}"

    def watch_pods(self, resource_version: str):
        self.calls.append(f"watch@{resource_version}")
        if not self.watches:
            raise plugin.Shutdown("done")
        step = self.watches.pop(0)
        if isinstance(step, BaseException):
            raise step
        yield from step


def with_rv(p: dict[str, Any], rv: str) -> dict[str, Any]:
    out = json.loads(json.dumps(p))
    out["metadata"]["resourceVersion"] = rv
    return out


def test_run_once_lists_annotates_and_exits() -> None:
    api = FakeApi([[pod("a", node_name="kwok-npu-0")]], [])
    plugin.run(api, R, once=True)
    assert api.calls == ["list"] and [p[1] for p in api.patches] == ["a"]


def test_run_resumes_from_last_resource_version_and_relists_on_gone(monkeypatch) -> None:
    monkeypatch.setattr(plugin.time, "sleep", lambda _s: None)
    bookmark = {"metadata": {"resourceVersion": "rv-bm"}}
    api = FakeApi(
        lists=[[], [], []],
        watches=[
            [("ADDED", with_rv(pod("a", node_name="kwok-npu-0"), "rv-a")), ("BOOKMARK", bookmark)],
            [("ADDED", with_rv(pod("b", node_name="kwok-npu-1"), "rv-b"))],
            plugin.Gone("too old"),
            ConnectionResetError("reset"),
        ],
    )
    with pytest.raises(plugin.Shutdown):
        plugin.run(api, R, once=False)
    assert api.calls == [
        "list", "watch@rv1",
        "watch@rv-bm",            # server timeout: resume from the bookmark
        "watch@rv-b", "list",     # 410 Gone: relist
        "watch@rv5", "list",      # connection error: back off, relist
        "watch@rv7",
    ]  # fmt: skip
    assert [p[1] for p in api.patches] == ["a", "b"]
