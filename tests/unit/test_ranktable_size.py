"""Rank tables that scale: compact above 512 KiB, one ConfigMap per file, the CRD bound honoured.

The CRD bounds a table with a linear size model (``builders/ranktable/size.py``); these
tests build every format at that bound with the longest names the API allows for the job (53),
namespace (63), pod (63) and node (63), 15-character IPv4 addresses and UUIDs, and check every file fits a
ConfigMap. A gang past the limit (forced here with 253-character node names) is never published:
the files stay ``initializing`` and the reason is ``RankTableTooLarge``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.builders.configmaps import build_ranktable_configmaps, ranktable_layout
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.builders.ranktable import (
    ASCEND_DEVICE_ANNOTATION,
    COMPACT_ABOVE_BYTES,
    FILE_LIMIT_BYTES,
    INITIALIZING,
    REASON_COMPLETED,
    REASON_TOO_LARGE,
    RankPod,
    RankTableRequest,
    build_rank_tables,
    max_servers,
)
from dpjob_operator.builders.ranktable.size import (
    GENERIC_PER_RANK,
    GENERIC_PER_SERVER,
    HCCL_PER_RANK,
    HCCL_PER_SERVER,
    MODEL_LIMIT_BYTES,
)
from tests.support.builders import JobBuilder
from tests.support.helm import CRD

pytestmark = pytest.mark.unit

JOB = "j" * 53
NS = "n" * 63
CONFIGMAP_LIMIT = 1024 * 1024


def crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _ip(i: int, net: int) -> str:
    """The longest IPv4 address (15 characters) for entity ``i`` of network ``net``."""
    return f"{100 + net}.{100 + i // 10000 % 100}.{100 + i // 100 % 100}.{100 + i % 100}"


def _annotation(index: int, devices: int) -> str:
    return json.dumps({
        "pod_name": f"{JOB}-rank-{index}", "server_id": _ip(index, 1), "host_ip": _ip(index, 1),
        "server_ip": _ip(index, 1), "super_pod_id": index // 48, "rack_id": 0, "server_index": str(index),
        "devices": [{"device_id": str(d), "device_ip": _ip(index * 16 + d, 2),
                     "super_device_id": str(index * 100 + d + 1)} for d in range(devices)],
    })


def _pod(index: int, devices: int | None, node_len: int = 63) -> RankPod:
    node = f"{index:08d}".rjust(node_len, "x")
    return RankPod(index=index, name=f"{JOB}-rank-{index}", uid=f"{index:08d}-ffff-ffff-ffff-ffffffffffff",
                   node=node, pod_ip=_ip(index, 3), host_ip=_ip(index, 1),
                   annotations={} if devices is None else {ASCEND_DEVICE_ANNOTATION: _annotation(index, devices)})


def _request(accelerator: str, replicas: int, procs: int, **fields: Any) -> RankTableRequest:
    return RankTableRequest(job_name=JOB, namespace=NS, restart=999, accelerator=accelerator, replicas=replicas,
                            procs_per_replica=procs, format="auto", **fields)


# (accelerator, processes per pod, extra request fields): every shape at the CRD's largest gang.
AT_THE_BOUND = [
    ("gpu", 1, {}), ("gpu", 8, {}), ("gpu", 16, {}), ("cpu", 128, {}),
    ("npu", 1, {"hccl_version": "1.0"}), ("npu", 8, {"hccl_version": "1.0"}),
    ("npu", 8, {"hccl_version": "1.2", "super_pod_size": 32}),
    ("npu", 16, {"hccl_version": "1.2", "super_pod_size": 32}),
]


@pytest.mark.parametrize(("accelerator", "procs", "fields"), AT_THE_BOUND,
                         ids=[f"{a}-x{p}-{f.get('hccl_version', 'generic')}" for a, p, f in AT_THE_BOUND])
def test_every_format_at_the_crd_bound_fits_a_configmap(accelerator, procs, fields):
    replicas = max_servers(procs, hccl=accelerator == "npu")
    req = _request(accelerator, replicas, procs, **fields)
    devices = procs if accelerator == "npu" else None
    result = build_rank_tables(req, [_pod(i, devices) for i in range(replicas)])
    assert result.ready and result.reason == REASON_COMPLETED, result.message
    for name, body in result.files.items():
        assert len(body.encode()) + len(name) <= CONFIGMAP_LIMIT, (name, len(body.encode()))
        json.loads(body)  # still valid JSON, whichever way it was written


def test_the_crd_states_the_size_model_the_operator_honours():
    """The CEL rules must use the same coefficients as the model the test above checks."""
    rules = [v["rule"] for v in crd_spec_schema()["x-kubernetes-validations"]]
    generic = f"{GENERIC_PER_SERVER} + {GENERIC_PER_RANK} * "
    hccl = f"{HCCL_PER_SERVER} + {HCCL_PER_RANK} * "
    assert any(generic in rule and f"<= {MODEL_LIMIT_BYTES}" in rule for rule in rules)
    assert any(hccl in rule and f"<= {MODEL_LIMIT_BYTES}" in rule and "npu" in rule for rule in rules)
    assert max_servers(8, hccl=False) * 8 >= 1100 * 8  # the 1,000+ GPU pods x 8 fit


def test_small_tables_stay_indented_and_large_ones_are_written_compact():
    small = build_rank_tables(_request("gpu", 2, 8), [_pod(i, None) for i in range(2)])
    assert "\n  " in small.files["ranktable.json"]  # readable with kubectl get cm -o yaml
    big = build_rank_tables(_request("gpu", 1100, 8), [_pod(i, None) for i in range(1100)])
    body = big.files["ranktable.json"]
    assert "\n" not in body and ", " not in body
    indented = json.dumps(json.loads(body), indent=2)
    assert len(indented.encode()) > COMPACT_ABOVE_BYTES  # so it was written compact for a reason
    assert len(indented.encode()) > CONFIGMAP_LIMIT > len(body.encode())  # the case: 1,100 x 8


def test_a_table_over_the_limit_is_never_published_and_says_why():
    # 253-character node names are legal but far past what the bound assumes.
    replicas = max_servers(1, hccl=False)
    pods = [_pod(i, None, node_len=253) for i in range(replicas)]
    result = build_rank_tables(_request("gpu", replicas, 1), pods)
    assert not result.ready and result.reason == REASON_TOO_LARGE
    assert result.files == {"ranktable.json": INITIALIZING}
    assert "ranktable.json" in result.message and f"{FILE_LIMIT_BYTES:,}" in result.message


# (accelerator, format, mindx) -> the ConfigMaps: one per file, the first keeps <job>-ranktable.
LAYOUTS = [
    ("cpu", "auto", False, {"ranktable.json": "t-ranktable"}),
    ("gpu", "generic", False, {"ranktable.json": "t-ranktable"}),
    ("npu", "hccl", False, {"hccl.json": "t-ranktable"}),
    ("npu", "auto", False, {"ranktable.json": "t-ranktable", "hccl.json": "t-ranktable-hccl"}),
    ("npu", "auto", True, {"ranktable.json": "t-ranktable", "hccl.json": "t-ranktable-hccl"}),
    ("gpu", "none", False, {}),
]


@pytest.mark.parametrize(("accelerator", "fmt", "mindx", "expected"), LAYOUTS)
def test_one_configmap_per_file_and_the_pods_mount_them_all_in_one_directory(accelerator, fmt, mindx, expected):
    job = (JobBuilder("t").accelerator(accelerator).procs(8)
           .set("rankTable", {"format": fmt, "mindxCompatible": mindx}).job())
    assert ranktable_layout(job) == expected
    files = dict.fromkeys(expected, "{}")
    maps = build_ranktable_configmaps(job, files, 0)
    by_name = {m["metadata"]["name"]: m["data"] for m in maps}
    for file, cm in expected.items():
        assert by_name[cm] == {file: "{}"}
    if mindx:
        assert by_name["rings-config-t"] == {"hccl.json": "{}", "version": "0"}
    pod = build_rank_pod(job, 0, 0, DEFAULT_POOLS[accelerator], "cluster.local", None)
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    table = volumes.get("dpjob-ranktable")
    if not expected:
        assert table is None
    elif len(expected) == 1:
        assert table["configMap"] == {"name": next(iter(expected.values()))}
    else:
        assert sorted(s["configMap"]["name"] for s in table["projected"]["sources"]) == sorted(expected.values())
