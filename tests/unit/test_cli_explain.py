"""`dpjob explain` without a cluster (--offline): every example explained by the operator's own
builders, invalid specs named, and the capacity arithmetic behind "does the gang fit now"."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from dpjob_cli.capacity import eligible, gang_capacity, quantity
from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.explain import explain_file, load_documents, pools_from_config
from dpjob_cli.explain_render import render_explanation
from dpjob_operator.builders.env import build_rank_env
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_operator.config import DEFAULT_POOLS
from tests.support.builders import JobBuilder
from tests.support.paths import EXAMPLES, example_files

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_every_example_is_explained_offline_and_nothing_is_created(path):
    [data] = explain_file(path, "default", None)
    doc = yaml.safe_load(path.read_text())
    assert data["job"]["name"] == doc["metadata"]["name"] and data["created"] == []
    assert [p["rank"] for p in data["pods"]] == data["shownRanks"]
    text = render_explanation(data)
    assert text.endswith("No objects were created.") and f"{doc['metadata']['name']}-rank-0" in text


def test_pods_and_env_are_exactly_what_the_operators_builders_make():
    [data] = explain_file(EXAMPLES / "gpu-ddp.yaml", "team-a", None)
    job = JobBuilder("gpu-ddp", "team-a").replicas(4).procs(8).accelerator("gpu").job()
    pod = build_rank_pod(job, 3, 0, DEFAULT_POOLS["gpu"])
    assert data["shownRanks"] == [0, 1, 2, 3]
    assert data["pods"][3]["nodeSelector"] == pod["spec"]["nodeSelector"]
    assert data["pods"][3]["limits"]["nvidia.com/gpu"] == "8"
    env = dict(build_rank_env(job, 3, 0, DEFAULT_POOLS["gpu"]))
    assert data["env"]["perRank"]["PET_NODE_RANK"] == {"0": "0", "1": "1", "2": "2", "3": "3"}
    assert data["env"]["common"]["WORLD_SIZE"] == env["WORLD_SIZE"] == "32"
    assert "RANK" not in data["env"]["common"] and "RANK" not in data["env"]["perRank"]  # torchrun's, per process


def test_big_jobs_show_ranks_0_1_and_the_last_unless_asked_for_all(tmp_path):
    path = write(tmp_path, JobBuilder("big").replicas(64).obj())
    [data] = explain_file(path, "default", None)
    assert data["shownRanks"] == [0, 1, 63] and [p["name"] for p in data["pods"]][-1] == "big-rank-63"
    assert "3 of 64 shown" in render_explanation(data)
    assert len(explain_file(path, "default", None, all_ranks=True)[0]["pods"]) == 64


@pytest.mark.parametrize("example, files, layout", [
    ("quickstart-cpu.yaml", ["ranktable.json"], [("quickstart-rank-0", [0]), ("quickstart-rank-1", [1])]),
    ("npu-ddp.yaml", ["hccl.json", "ranktable.json"],
     [("npu-ddp-rank-0", list(range(8))), ("npu-ddp-rank-1", list(range(8, 16)))]),
    ("mindspore-npu.yaml", ["hccl.json"],
     [("mindspore-npu-rank-0", list(range(8))), ("mindspore-npu-rank-1", list(range(8, 16)))]),
    ("mindspore-cpu.yaml", ["ranktable.json"], [("mindspore-cpu-rank-0", [0]), ("mindspore-cpu-rank-1", [1])]),
])
def test_rank_table_layout_maps_global_ranks_onto_pods(example, files, layout):
    [data] = explain_file(EXAMPLES / example, "default", None)
    table = data["rankTable"]
    assert table["files"] == files
    assert [(row["pod"], row["ranks"]) for row in table["layout"]] == layout


def test_mindspore_cpu_example_starts_msrun_from_the_operators_environment():
    """Every variable the example's shell line reads is one the operator sets in each rank pod, and
    each msrun flag takes the MS_* value meant for it (worker_num counts processes, not pods)."""
    [data] = explain_file(EXAMPLES / "mindspore-cpu.yaml", "default", None)
    doc = yaml.safe_load((EXAMPLES / "mindspore-cpu.yaml").read_text())
    [container] = doc["spec"]["template"]["spec"]["containers"]
    [line] = container["args"]
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", line))
    assert {"MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_LOCAL_WORKER", "MS_NODE_RANK"} <= used
    for rank in ("0", "1"):
        env = {**data["env"]["common"], **{k: v[rank] for k, v in data["env"]["perRank"].items() if rank in v}}
        assert used <= env.keys(), f"rank {rank} lacks {sorted(used - env.keys())}"
    for flag in ("--worker_num=$MS_WORKER_NUM", "--local_worker_num=$MS_LOCAL_WORKER", "--master_addr=$MS_SCHED_HOST",
                 "--master_port=$MS_SCHED_PORT", "--node_rank=$MS_NODE_RANK", "--join=True"):
        assert flag in line
    assert (data["env"]["common"]["MS_WORKER_NUM"], data["env"]["common"]["MS_LOCAL_WORKER"]) == ("2", "1")
    assert data["env"]["perRank"]["DPJOB_MS_SCHEDULER"] == {"0": "1", "1": "0"}  # one scheduler, rank pod 0


def write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(doc if isinstance(doc, list) else [doc]))
    return path


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(name="main"), "spec.template.spec.containers"),
    (lambda d: d["spec"].update(accelerator="tpu"), "spec.accelerator"),
    (lambda d: d["spec"].update(rankTable={"format": "hccl"}), "spec.rankTable.format"),
])
def test_invalid_spec_names_the_field_with_exit_code_6(tmp_path, mutate, field):
    doc = JobBuilder("bad").obj()
    mutate(doc)
    with pytest.raises(CliError) as err:
        explain_file(write(tmp_path, doc), "default", None)
    assert err.value.code == ExitCode.INVALID_SPEC and field in err.value.message


@pytest.mark.parametrize("text, message", [
    ("", "has no DataParallelJob"),
    ("kind: ConfigMap\napiVersion: v1\n", "has no DataParallelJob"),
    ("spec: [unclosed\n", "is not valid YAML (line 2)"),
])
def test_files_that_hold_no_job_are_bad_input(tmp_path, text, message):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(CliError) as err:
        load_documents(path)
    assert err.value.code == ExitCode.BAD_INPUT and message in err.value.message


def test_installed_operator_pools_are_read_with_the_operators_own_loader():
    pools, source = pools_from_config('{"pools": {"cpu": {"nodeSelector": {"dpjob.io/pool": "real"}}}}')
    assert pools["cpu"].node_selector == {"dpjob.io/pool": "real"} and "installed" in source
    assert pools_from_config(None) == (DEFAULT_POOLS, "operator defaults")


@pytest.mark.parametrize("text, value", [("500m", Decimal("0.5")), ("2", Decimal(2)), ("512Mi", Decimal(2**29)),
                                         ("1G", Decimal(10**9)), ("1.5Gi", Decimal(3 * 2**29)), ("1e3", Decimal(1000))])
def test_quantities_parse_to_base_units(text, value):
    assert quantity(text) == value


def node(name: str, cpu: str = "4", memory: str = "8Gi", labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, ready: bool = True, **extra: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110", **extra},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def rank_pod_spec(cpu: str = "1", gpu: str | None = None, **spec: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpu} if gpu else {}
    return {"containers": [{"name": "trainer", "resources": {"requests": {"cpu": cpu}, "limits": limits}}], **spec}


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize("the_node, spec, ok", [
    (node("a"), rank_pod_spec(), True),
    (node("a", ready=False), rank_pod_spec(), False),
    (node("a", taints=[GPU_TAINT]), rank_pod_spec(), False),
    (node("a", taints=[GPU_TAINT]), rank_pod_spec(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]),
     True),
    (node("a", labels={"pool": "x"}), rank_pod_spec(nodeSelector={"pool": "y"}), False),
    (node("a", taints=[{"key": "k", "effect": "PreferNoSchedule"}]), rank_pod_spec(), True),
])
def test_eligible_nodes_match_selector_taints_and_readiness(the_node, spec, ok):
    assert eligible(the_node, spec) is ok


def test_gang_fits_only_when_free_room_holds_every_rank_at_once():
    nodes = [node("g1", **{"nvidia.com/gpu": "8"}), node("g2", **{"nvidia.com/gpu": "8"}), node("c1")]
    busy = [{"spec": {"nodeName": "g2", **rank_pod_spec(cpu="1", gpu="4")}}]
    cap = gang_capacity(nodes, busy, rank_pod_spec(cpu="1", gpu="8"), needed=2)
    assert (cap.fits, cap.room, cap.per_node) == (False, 1, {"g1": 1, "g2": 0, "c1": 0})
    cap = gang_capacity(nodes, [], rank_pod_spec(cpu="1", gpu="4"), needed=4)
    assert (cap.fits, cap.room, cap.request) == (True, 4, {"cpu": "1", "nvidia.com/gpu": "4"})


def test_with_a_topology_key_the_gang_must_fit_in_one_domain():
    nodes = [node("a", cpu="2", labels={"rack": "r1"}), node("b", cpu="2", labels={"rack": "r2"})]
    cap = gang_capacity(nodes, [], rank_pod_spec(cpu="1"), needed=3, topology_key="rack")
    assert (cap.fits, cap.room) == (False, 2)
    assert gang_capacity(nodes, [], rank_pod_spec(cpu="1"), needed=3).fits


@pytest.mark.parametrize(("tolerations", "taint", "expected"), [
    ([{}], {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, False),  # an empty toleration
    ([{"operator": "Exists"}], {"key": "anything", "effect": "NoExecute"}, True),  # empty key + Exists: all
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
     {"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}, False),  # another effect
    ([{"key": "k", "value": "v"}], {"key": "k", "value": "v", "effect": "NoSchedule"}, True),  # Equal by default
    ([{"key": "k", "value": "w"}], {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    # Kubernetes' ToleratesTaint: Exists ignores the value, an empty effect matches every effect, and an
    # empty key with Exists is still bound by its effect.
    ([{"key": "k", "operator": "Exists", "value": "ignored"}], {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ([{"key": "k", "operator": "Equal", "value": "v"}], {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ([{"operator": "Exists", "effect": "NoSchedule"}], {"key": "k", "effect": "NoExecute"}, False),
    ([{"key": "other", "operator": "Exists"}], {"key": "k", "effect": "NoSchedule"}, False),
    ([], {"key": "k", "effect": "NoSchedule"}, False),
])
def test_the_cli_and_the_operator_agree_on_which_taints_a_pod_tolerates(tolerations, taint, expected):
    """`dpjob explain` says whether a gang fits; the operator says why it does not: one rule."""
    from dpjob_cli.capacity import tolerates as cli_tolerates
    from dpjob_operator.api.tolerations import untolerated

    assert cli_tolerates(tolerations, taint) is expected
    assert (untolerated([taint], tolerations) == []) is expected
