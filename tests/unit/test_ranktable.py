"""Rank-table builder: generic and HCCL 1.0/1.2 content, ordering, typing, readiness."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest

from dpjob_operator.builders.ranktable import (
    ASCEND_DEVICE_ANNOTATION,
    INITIALIZING,
    AscendAnnotationError,
    RankPod,
    RankTableNotReadyError,
    RankTableRequest,
    RankTableRequestError,
    build_generic_rank_table,
    build_hccl_rank_table,
    build_rank_tables,
    logical_super_pod_id,
    parse_ascend_device_annotation,
    select_hccl_version,
)

pytestmark = pytest.mark.unit

JOB, NS = "train", "team-a"
SUPER_POD_16 = "module-a3-16-super-pod"


# ---------------------------------------------------------------------------------------------
# Fluent helpers


def device_annotation(index: int, devices: int, **overrides: Any) -> str:
    """What the (simulated) device plugin writes for rank pod ``index`` (own data)."""
    body: dict[str, Any] = {
        "pod_name": f"{JOB}-rank-{index}",
        "server_id": f"uid-{index}",
        "host_ip": f"10.0.1.{index + 1}",
        "server_ip": f"10.0.1.{index + 1}",
        "super_pod_id": 0,
        "rack_id": 0,
        "server_index": str(index),
        "devices": [
            {
                "device_id": str(device),
                "device_ip": f"10.{20 + device}.0.{index + 1}",
                "super_device_id": str(index * 100 + device + 1),
            }
            for device in range(devices)
        ],
    }
    body.update(overrides)
    return json.dumps(body)


class Pods(list):
    """A list of RankPod with chainable edits; every edit returns a new Pods."""

    def _edit(self, index: int, **changes: Any) -> Pods:
        return Pods(dataclasses.replace(p, **changes) if p.index == index else p for p in self)

    def no_ip(self, *indexes: int) -> Pods:
        out = self
        for index in indexes:
            out = out._edit(index, pod_ip=None)
        return out

    def annotate(self, index: int, text: str | None) -> Pods:
        annotations = {} if text is None else {ASCEND_DEVICE_ANNOTATION: text}
        return self._edit(index, annotations=annotations)

    def no_annotation(self, *indexes: int) -> Pods:
        out = self
        for index in indexes:
            out = out.annotate(index, None)
        return out

    def devices(self, index: int, edit) -> Pods:
        """Apply ``edit(list_of_device_dicts)`` to pod ``index``'s annotation."""
        pod = next(p for p in self if p.index == index)
        body = json.loads(pod.annotations[ASCEND_DEVICE_ANNOTATION])
        edit(body["devices"])
        return self.annotate(index, json.dumps(body))

    def without(self, *indexes: int) -> Pods:
        return Pods(p for p in self if p.index not in indexes)

    def plus(self, **fields: Any) -> Pods:
        return Pods([*self, rank_pod(**fields)])

    def shuffled(self, seed: int) -> Pods:
        """Pods in random order, and each pod's annotation devices in random order too."""
        rng = random.Random(seed)
        out = []
        for pod in self:
            text = pod.annotations.get(ASCEND_DEVICE_ANNOTATION)
            if text is not None:
                body = json.loads(text)
                rng.shuffle(body["devices"])
                pod = dataclasses.replace(
                    pod, annotations={ASCEND_DEVICE_ANNOTATION: json.dumps(body)}
                )
            out.append(pod)
        rng.shuffle(out)
        return Pods(out)


def rank_pod(index: int, devices: int | None = None, **fields: Any) -> RankPod:
    values: dict[str, Any] = {
        "index": index,
        "name": f"{JOB}-rank-{index}",
        "uid": f"uid-{index}",
        "node": f"node-{index}",
        "pod_ip": f"10.244.{index}.10",
        "host_ip": f"10.0.1.{index + 1}",
        "annotations": {}
        if devices is None
        else {ASCEND_DEVICE_ANNOTATION: device_annotation(index, devices)},
    }
    values.update(fields)
    return RankPod(**values)


def pods(n: int, devices: int | None = 8) -> Pods:
    """``n`` ready rank pods; ``devices`` Ascend chips each (None: no annotation, GPU/CPU)."""
    return Pods(rank_pod(i, devices) for i in range(n))


def request(accelerator: str = "npu", replicas: int = 2, procs: int = 8, **fields: Any):
    return RankTableRequest(
        job_name=JOB,
        namespace=NS,
        restart=fields.pop("restart", 0),
        accelerator=accelerator,
        replicas=replicas,
        procs_per_replica=procs,
        format=fields.pop("format", "auto"),
        **fields,
    )


def leaves(node: Any):
    if isinstance(node, dict):
        for value in node.values():
            yield from leaves(value)
    elif isinstance(node, list):
        for value in node:
            yield from leaves(value)
    else:
        yield node


# ---------------------------------------------------------------------------------------------
# Generic table


@pytest.mark.parametrize("accelerator", ["cpu", "gpu"])
@pytest.mark.parametrize("procs", [1, 8])
def test_generic_table_for_cpu_and_gpu(accelerator: str, procs: int) -> None:
    result = build_rank_tables(request(accelerator, replicas=3, procs=procs), pods(3, None))

    assert (result.ready, result.reason, result.version) == (True, "Completed", "generic")
    assert list(result.files) == ["ranktable.json"]
    table = json.loads(result.files["ranktable.json"])
    assert list(table) == [
        "apiVersion", "status", "job", "namespace", "restart", "accelerator",
        "worldSize", "replicas", "procsPerReplica", "servers",
    ]  # fmt: skip
    assert table["apiVersion"] == "dpjob.io/ranktable/v1"
    assert table["status"] == "completed"
    assert (table["job"], table["namespace"], table["accelerator"]) == (JOB, NS, accelerator)
    assert table["worldSize"] == 3 * procs
    assert [s["podIndex"] for s in table["servers"]] == [0, 1, 2]
    assert table["servers"][1] == {
        "podIndex": 1,
        "pod": f"{JOB}-rank-1",
        "uid": "uid-1",
        "node": "node-1",
        "podIP": "10.244.1.10",
        "hostIP": "10.0.1.2",
        "ranks": [
            {"rank": procs + local, "localRank": local, "deviceId": None} for local in range(procs)
        ],
    }
    all_ranks = [r["rank"] for s in table["servers"] for r in s["ranks"]]
    assert all_ranks == list(range(3 * procs))


def test_generic_table_on_npu_carries_device_ids() -> None:
    shuffled_devices = pods(2, 4).devices(1, lambda devs: devs.reverse())
    table = build_generic_rank_table(request(replicas=2, procs=4), shuffled_devices)
    assert [r["deviceId"] for r in table["servers"][1]["ranks"]] == ["0", "1", "2", "3"]
    assert [r["rank"] for r in table["servers"][1]["ranks"]] == [4, 5, 6, 7]


def test_generic_table_records_restart_generation() -> None:
    result = build_rank_tables(request("cpu", replicas=1, procs=1, restart=3), pods(1, None))
    assert json.loads(result.files["ranktable.json"])["restart"] == 3
    assert "restart 3" in result.message


# ---------------------------------------------------------------------------------------------
# HCCL content


def test_hccl_1_0_exact_content() -> None:
    result = build_rank_tables(request(replicas=2, procs=2), pods(2, 2))

    assert (result.ready, result.version) == (True, "1.0")
    assert list(result.files) == ["ranktable.json", "hccl.json"]
    assert json.loads(result.files["hccl.json"]) == {
        "version": "1.0",
        "status": "completed",
        "server_count": "2",
        "server_list": [
            {
                "server_id": "uid-0",
                "host_ip": "10.0.1.1",
                "container_ip": "10.244.0.10",
                "device": [
                    {"device_id": "0", "device_ip": "10.20.0.1", "rank_id": "0"},
                    {"device_id": "1", "device_ip": "10.21.0.1", "rank_id": "1"},
                ],
            },
            {
                "server_id": "uid-1",
                "host_ip": "10.0.1.2",
                "container_ip": "10.244.1.10",
                "device": [
                    {"device_id": "0", "device_ip": "10.20.0.2", "rank_id": "2"},
                    {"device_id": "1", "device_ip": "10.21.0.2", "rank_id": "3"},
                ],
            },
        ],
    }


def test_hccl_1_2_exact_content_with_logical_super_pods() -> None:
    # sp-block 4 chips, 2 chips per pod -> 2 pods per logical SuperPoD.
    req = request(replicas=3, procs=2, super_pod_size=4)
    table = json.loads(build_rank_tables(req, pods(3, 2)).files["hccl.json"])

    assert table["version"] == "1.2"
    assert list(table) == ["version", "status", "server_count", "server_list", "super_pod_list"]
    assert table["server_list"][2]["device"] == [
        {"device_id": "0", "super_device_id": "201", "device_ip": "10.20.0.3", "rank_id": "4"},
        {"device_id": "1", "super_device_id": "202", "device_ip": "10.21.0.3", "rank_id": "5"},
    ]
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "uid-0"}, {"server_id": "uid-1"}]},
        {"super_pod_id": "1", "server_list": [{"server_id": "uid-2"}]},
    ]


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_every_hccl_leaf_is_a_string(version: str) -> None:
    table = build_hccl_rank_table(request(replicas=3, procs=8, hccl_version=version), pods(3, 8))
    assert table["version"] == version
    values = list(leaves(table))
    assert values and all(isinstance(value, str) for value in values)


def test_device_ids_sort_numerically_not_lexically() -> None:
    # Devices 2 and 10 of a 16-chip node: "10" < "2" as text, 2 < 10 as numbers.
    def pick(devs: list) -> None:
        devs[:] = [
            {"device_id": "10", "device_ip": "10.30.0.1"},
            {"device_id": "2", "device_ip": "10.22.0.1"},
        ]

    table = build_hccl_rank_table(request(replicas=1, procs=2), pods(1, 2).devices(0, pick))
    assert [(d["device_id"], d["rank_id"]) for d in table["server_list"][0]["device"]] == [
        ("2", "0"),
        ("10", "1"),
    ]


@pytest.mark.parametrize(("replicas", "procs"), [(1, 1), (3, 8), (4, 16)])
def test_rank_ids_are_contiguous_per_server(replicas: int, procs: int) -> None:
    table = build_hccl_rank_table(request(replicas=replicas, procs=procs), pods(replicas, procs))
    for index, server in enumerate(table["server_list"]):
        ranks = [int(d["rank_id"]) for d in server["device"]]
        assert ranks == list(range(index * procs, (index + 1) * procs))
    all_ranks = [int(d["rank_id"]) for s in table["server_list"] for d in s["device"]]
    assert all_ranks == list(range(replicas * procs))


@pytest.mark.parametrize("version", ["1.0", "1.2"])
@pytest.mark.parametrize("seed", range(5))
def test_same_pods_in_any_order_give_identical_bytes(version: str, seed: int) -> None:
    req = request(replicas=6, procs=8, hccl_version=version, super_pod_size=16)
    ordered = build_rank_tables(req, pods(6, 8))
    shuffled = build_rank_tables(req, pods(6, 8).shuffled(seed))
    assert ordered.ready and shuffled.files == ordered.files
    assert ordered.files["hccl.json"] == json.dumps(
        json.loads(ordered.files["hccl.json"]), indent=2
    )


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("annotation", ["uid-0", "uid-1"]),
        ("pod-uid", ["uid-0", "uid-1"]),
        ("pod-ip", ["10.244.0.10", "10.244.1.10"]),
        ("host-ip", ["10.0.1.1", "10.0.1.2"]),
    ],
)
def test_server_id_modes(mode: str, expected: list[str]) -> None:
    table = build_hccl_rank_table(request(procs=2, server_id_mode=mode), pods(2, 2))
    assert [s["server_id"] for s in table["server_list"]] == expected


def test_annotation_server_id_wins_and_falls_back_to_pod_uid() -> None:
    body = json.loads(device_annotation(0, 2))
    body["server_id"] = "from-plugin"
    no_id = json.loads(device_annotation(1, 2))
    del no_id["server_id"]
    observed = pods(2, 2).annotate(0, json.dumps(body)).annotate(1, json.dumps(no_id))
    table = build_hccl_rank_table(request(procs=2), observed)
    assert [s["server_id"] for s in table["server_list"]] == ["from-plugin", "uid-1"]


def test_host_ip_falls_back_to_pod_host_ip_and_is_omitted_when_unknown() -> None:
    body = json.loads(device_annotation(0, 1))
    del body["host_ip"]
    observed = pods(2, 1).annotate(0, json.dumps(body))
    observed = Pods(dataclasses.replace(p, host_ip=None) if p.index == 1 else p for p in observed)
    body1 = json.loads(device_annotation(1, 1))
    del body1["host_ip"]
    observed = observed.annotate(1, json.dumps(body1))
    servers = build_hccl_rank_table(request(procs=1), observed)["server_list"]
    assert servers[0]["host_ip"] == "10.0.1.1"
    assert "host_ip" not in servers[1]


def test_shared_host_ip_is_a_duplicate_server_id() -> None:
    observed = Pods(dataclasses.replace(p, host_ip="10.0.1.1") for p in pods(2, 4))
    observed = observed.annotate(0, device_annotation(0, 4, host_ip="10.0.1.1"))
    observed = observed.annotate(1, device_annotation(1, 4, host_ip="10.0.1.1"))
    result = build_rank_tables(request(procs=4, server_id_mode="host-ip"), observed)
    assert (result.ready, result.reason) == (False, "DuplicateServerID")
    assert "train-rank-0, train-rank-1 share server_id 10.0.1.1" in result.message
    # The default (pod UID from the annotation) stays unique on a shared node.
    assert build_rank_tables(request(procs=4), observed).ready


# ---------------------------------------------------------------------------------------------
# Version selection


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "1.0"),
        ({"super_pod_size": 16}, "1.2"),
        ({"node_selector": {"accelerator-type": "module-a3-16-super-pod"}}, "1.2"),
        ({"node_selector": {"accelerator-type": "module-a3-8-super-pod"}}, "1.2"),
        ({"node_selector": {"accelerator-type": "module-a3-16"}}, "1.0"),
        ({"node_selector": {"accelerator": "huawei-Ascend910"}}, "1.0"),
        ({"hccl_version": "1.2"}, "1.2"),
        ({"hccl_version": "1.0", "super_pod_size": 16}, "1.0"),
        ({"hccl_version": "1.0", "node_selector": {"accelerator-type": SUPER_POD_16}}, "1.0"),
    ],
)
def test_select_hccl_version(fields: dict, expected: str) -> None:
    req = request(**fields)
    assert select_hccl_version(req) == expected
    assert build_rank_tables(req, pods(2, 8)).version == expected


@pytest.mark.parametrize(
    ("pod_index", "size", "per_pod", "expected"),
    [
        (5, None, 8, 0),
        (5, 0, 8, 0),
        (0, 16, 8, 0),
        (1, 16, 8, 0),
        (2, 16, 8, 1),
        (7, 32, 8, 1),
        (3, 8, 8, 3),
        (3, 4, 8, 3),  # sp-block smaller than a node: one pod per SuperPoD (ascend-operator)
    ],
)
def test_logical_super_pod_id(pod_index: int, size: int | None, per_pod: int, expected: int):
    assert logical_super_pod_id(pod_index, size, per_pod) == expected


def test_1_2_without_size_puts_every_server_in_super_pod_0() -> None:
    req = request(replicas=3, procs=2, hccl_version="1.2")
    table = build_hccl_rank_table(req, pods(3, 2))
    assert [p["super_pod_id"] for p in table["super_pod_list"]] == ["0"]
    assert len(table["super_pod_list"][0]["server_list"]) == 3


# ---------------------------------------------------------------------------------------------
# Readiness


def test_not_ready_files_are_the_exact_placeholder_bytes() -> None:
    result = build_rank_tables(request(), pods(2).no_ip(1))
    assert INITIALIZING == '{"status": "initializing"}' == json.dumps({"status": "initializing"})
    assert result.files == {"ranktable.json": INITIALIZING, "hccl.json": INITIALIZING}
    assert result.version == "1.0"


@pytest.mark.parametrize(
    ("observed", "reason", "fragments"),
    [
        (pods(4).without(1, 3), "WaitingForPods", ["index 1, 3", "2 of 4 observed"]),
        (pods(4).no_ip(2), "WaitingForPodIPs", ["train-rank-2"]),
        (
            pods(4).no_annotation(0, 3),
            "WaitingForDeviceAnnotation",
            ["train-rank-0, train-rank-3", ASCEND_DEVICE_ANNOTATION],
        ),
        (
            pods(4).devices(2, lambda devs: devs[5].update(device_ip="-1")),
            "InvalidDeviceAnnotation",
            ["train-rank-2", "device 5", '"-1"', "node-2"],
        ),
        (
            pods(4).devices(1, lambda devs: devs[0].pop("device_ip")),
            "InvalidDeviceAnnotation",
            ["train-rank-1: device 0 has no device_ip"],
        ),
        (pods(4).annotate(3, "{not json"), "InvalidDeviceAnnotation", ["train-rank-3", "JSON"]),
        (pods(4).annotate(3, "[]"), "InvalidDeviceAnnotation", ["must be a JSON object"]),
        (pods(4).annotate(3, '{"pod_name": "x"}'), "InvalidDeviceAnnotation", ['"devices"']),
        (
            pods(4).devices(0, lambda devs: devs[1].update(device_id="npu1")),
            "InvalidDeviceAnnotation",
            ["train-rank-0", "non-negative integer", "'npu1'"],
        ),
        (
            pods(4).devices(0, lambda devs: devs[1].update(device_id="0")),
            "InvalidDeviceAnnotation",
            ["device_id 0 appears more than once"],
        ),
        (
            pods(4).devices(2, lambda devs: devs.pop()),
            "DeviceCountMismatch",
            ["train-rank-2: has 7 Ascend devices, procsPerReplica is 8"],
        ),
        (
            pods(4).annotate(1, device_annotation(1, 0)),
            "DeviceCountMismatch",
            ["train-rank-1: has 0 Ascend devices"],
        ),
    ],
)
def test_not_ready_reasons(observed: Pods, reason: str, fragments: list[str]) -> None:
    result = build_rank_tables(request(replicas=4), observed)
    assert (result.ready, result.reason) == (False, reason)
    for fragment in fragments:
        assert fragment in result.message
    assert set(result.files.values()) == {INITIALIZING}


def test_missing_super_device_id_is_invalid_only_for_1_2() -> None:
    observed = pods(2, 2).devices(1, lambda devs: devs[1].pop("super_device_id"))
    assert build_rank_tables(request(procs=2), observed).ready  # 1.0 ignores it
    result = build_rank_tables(request(procs=2, super_pod_size=4), observed)
    assert (result.ready, result.reason) == (False, "InvalidDeviceAnnotation")
    assert "train-rank-1: device 1 has no super_device_id" in result.message


def test_invalid_device_ip_only_blocks_hccl_output() -> None:
    observed = pods(2, 2).devices(0, lambda devs: devs[0].update(device_ip="-1"))
    assert not build_rank_tables(request(procs=2), observed).ready
    generic_only = build_rank_tables(request(procs=2, format="generic"), observed)
    assert generic_only.ready and list(generic_only.files) == ["ranktable.json"]


def test_permanent_problems_outrank_waiting_and_every_problem_is_reported() -> None:
    observed = pods(3).no_ip(0).devices(2, lambda devs: devs[3].update(device_ip="-1"))
    result = build_rank_tables(request(replicas=3), observed)
    assert result.reason == "InvalidDeviceAnnotation"
    assert result.message.index("device 3") < result.message.index("waiting for pod IPs")
    assert "train-rank-0" in result.message


def test_cpu_pods_need_only_ips() -> None:
    req = request("cpu", replicas=2, procs=1)
    assert build_rank_tables(req, pods(2, None)).ready
    result = build_rank_tables(req, pods(2, None).no_ip(0, 1))
    assert (result.reason, result.files) == ("WaitingForPodIPs", {"ranktable.json": INITIALIZING})
    assert "train-rank-0, train-rank-1" in result.message


def test_long_lists_in_messages_are_truncated() -> None:
    observed = pods(128, None).no_ip(*range(128))
    result = build_rank_tables(request("cpu", replicas=128, procs=1), observed)
    assert "train-rank-4 and 123 more" in result.message
    assert "train-rank-5," not in result.message


def test_pods_beyond_replicas_are_ignored() -> None:
    observed = pods(2, 8).plus(index=2, devices=4).plus(index=7, pod_ip=None)
    result = build_rank_tables(request(replicas=2), observed)
    assert result.ready
    assert build_rank_tables(request(replicas=2), pods(2, 8)).files == result.files


def test_two_pods_with_one_index_are_reported_not_guessed() -> None:
    observed = pods(2, 8).plus(index=1, devices=8, name="train-rank-1-old", uid="uid-old")
    result = build_rank_tables(request(replicas=2), list(reversed(observed)))
    assert (result.ready, result.reason) == (False, "DuplicateRankIndex")
    assert "index 1 is claimed by train-rank-1, train-rank-1-old" in result.message


def test_format_none_is_disabled() -> None:
    result = build_rank_tables(request(format="none"), [])
    assert (result.ready, result.reason, result.version, result.files) == (
        False,
        "Disabled",
        "none",
        {},
    )


def test_low_level_builders_refuse_incomplete_input() -> None:
    with pytest.raises(RankTableNotReadyError) as caught:
        build_hccl_rank_table(request(), pods(2).no_annotation(1))
    assert caught.value.reason == "WaitingForDeviceAnnotation"
    with pytest.raises(RankTableNotReadyError):
        build_generic_rank_table(request("gpu"), pods(1, None))


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"accelerator": "tpu"}, "spec.accelerator"),
        ({"format": "mpi"}, "spec.rankTable.format"),
        ({"accelerator": "gpu", "format": "hccl"}, "needs accelerator npu"),
        ({"hccl_version": "2.0"}, "hcclVersion"),
        ({"replicas": 0}, "spec.replicas must be >= 1, got 0"),
        ({"procs": 0}, "spec.procsPerReplica must be >= 1"),
        ({"super_pod_size": 12}, "multiple of procsPerReplica"),
        ({"super_pod_size": 4}, "multiple of procsPerReplica"),
        ({"server_id_mode": "node-name"}, "server id mode"),
    ],
)
def test_invalid_requests_raise(fields: dict, fragment: str) -> None:
    accelerator = fields.pop("accelerator", "npu")
    with pytest.raises(RankTableRequestError, match=fragment):
        build_rank_tables(request(accelerator, **fields), pods(2))


# ---------------------------------------------------------------------------------------------
# Annotation parsing


def test_parse_annotation_normalises_and_sorts() -> None:
    text = json.dumps(
        {
            "pod_name": "p",
            "server_id": "u",
            "host_ip": "10.0.0.1",
            "super_pod_id": 3,
            "rack_id": 0,
            "server_index": "1",
            "devices": [
                {"device_id": 5, "device_ip": "10.25.0.1", "super_device_id": 206},
                {"device_id": "4", "device_ip": "10.24.0.1"},
            ],
        }
    )
    parsed = parse_ascend_device_annotation(text)
    assert [d.device_id for d in parsed.devices] == ["4", "5"]
    assert parsed.devices[1].super_device_id == "206"
    assert parsed.devices[0].super_device_id is None
    assert (parsed.super_pod_id, parsed.server_ip, parsed.server_index) == ("3", None, "1")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        '"x"',
        '{"devices": {}}',
        '{"devices": ["0"]}',
        '{"devices": [{"device_ip": "1.2.3.4"}]}',
        '{"devices": [{"device_id": -1}]}',
        '{"devices": [{"device_id": true}]}',
        '{"devices": [{"device_id": "0", "device_ip": ["x"]}]}',
    ],
)
def test_parse_annotation_rejects_bad_shapes(text: str) -> None:
    with pytest.raises(AscendAnnotationError) as caught:
        parse_ascend_device_annotation(text)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value)
