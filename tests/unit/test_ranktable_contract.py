"""The rank-table contract between images: what the operator writes is what the others read.

The trainer image and the dev cluster's simulated device plugin are built and shipped apart
from the operator, so each keeps its own copy of a shared value; these tests hold the copies
equal, and check that ``RANK_TABLE_FILE`` points at a file the operator actually writes.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

import pytest
import yaml

from devcluster import ascend_sim
from dpjob_operator.api import constants as c
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.builders import ranktable as rt
from dpjob_operator.builders.configmaps import (
    build_ranktable_configmaps,
    rank_table_request,
)
from dpjob_operator.builders.pods import build_rank_pod
from dpjob_trainer import ranktable as trainer
from tests.support.builders import JobBuilder
from tests.support.paths import REPO
from tests.support.podenv import rank_env

pytestmark = pytest.mark.unit
CRDS = [REPO / "crds" / "dataparalleljob.yaml", REPO / "helm" / "dpjob-operator" / "files" / "dataparalleljob.yaml"]


def test_trainer_waits_for_the_status_the_operator_writes() -> None:
    assert trainer.STATUS_COMPLETED == rt.STATUS_COMPLETED


def _cpu_table() -> str:
    req = rt.RankTableRequest(job_name="train", namespace="ns", restart=0, accelerator="cpu",
                              replicas=1, procs_per_replica=1, format="auto")
    pod = rt.RankPod(index=0, name="train-rank-0", uid="u0", node="n0", pod_ip="10.0.0.1", host_ip="10.1.0.1")
    return rt.build_rank_tables(req, [pod]).files[rt.GENERIC_FILE]


@pytest.mark.parametrize("body, status, usable", [
    (rt.INITIALIZING, rt.STATUS_INITIALIZING, False),
    (_cpu_table(), rt.STATUS_COMPLETED, True),
], ids=["initializing", "completed"])
def test_trainer_reads_operator_files(tmp_path: Path, body: str, status: str, usable: bool) -> None:
    path = tmp_path / rt.GENERIC_FILE
    path.write_text(body)
    assert trainer.read_rank_table_status(str(path))[0] == status
    if usable:
        assert trainer.wait_for_rank_table(str(path), timeout=0) == json.loads(body)
    else:
        with pytest.raises(trainer.RankTableTimeout):
            trainer.wait_for_rank_table(str(path), timeout=0)


@pytest.mark.parametrize("builder", [
    JobBuilder().accelerator("cpu"),
    JobBuilder().accelerator("gpu").procs(8),
    JobBuilder().accelerator("npu").procs(8),
    JobBuilder().accelerator("npu").procs(8).set("rankTable", {"format": "generic"}),
    JobBuilder().accelerator("npu").procs(8).set("rankTable", {"format": "hccl", "mountPath": "/rt/"}),
    JobBuilder().accelerator("npu").procs(8).set("rankTable", {"mindxCompatible": True}),
], ids=["cpu", "gpu", "npu-auto", "npu-generic", "npu-hccl-custom-path", "npu-mindx"])
def test_rank_table_file_env_names_a_written_file(builder: JobBuilder) -> None:
    """In the rank pod, ``RANK_TABLE_FILE`` lies in a mounted ConfigMap that holds that key."""
    job = builder.job()
    pod = build_rank_pod(job, 0, 0, DEFAULT_POOLS[job.spec.accelerator])
    trainer_container = pod["spec"]["containers"][0]
    env = rank_env(pod, job, DEFAULT_POOLS[job.spec.accelerator])
    files = dict.fromkeys(rt.output_files(rank_table_request(job, 0)), rt.INITIALIZING)
    data_of = {cm["metadata"]["name"]: cm["data"] for cm in build_ranktable_configmaps(job, files, 0)}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}

    def files_of(volume: dict) -> dict:  # a configMap volume, or a projected one of several maps
        sources = [s["configMap"] for s in volume["projected"]["sources"]] if "projected" in volume \
            else [volume["configMap"]]
        return {k: v for source in sources for k, v in data_of[source["name"]].items()}

    mounted = {m["mountPath"].rstrip("/"): files_of(volumes[m["name"]]) for m in trainer_container["volumeMounts"]}
    directory, name = posixpath.split(env["RANK_TABLE_FILE"])
    assert name in mounted[directory]


def test_simulated_device_plugin_writes_the_annotation_the_operator_reads() -> None:
    assert ascend_sim.CONFIG_ANNOTATION_910 == rt.ASCEND_DEVICE_ANNOTATION == c.ASCEND_ANNOTATION


@pytest.mark.parametrize("crd", CRDS, ids=["crds", "chart"])
def test_crd_default_mount_path_is_the_operators(crd: Path) -> None:
    doc = yaml.safe_load(crd.read_text())
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    mount = spec["properties"]["rankTable"]["properties"]["mountPath"]
    assert mount["default"] == c.RANKTABLE_MOUNT_PATH
