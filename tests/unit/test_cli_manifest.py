"""dpjob run's pure parts: packing a script into ConfigMap data, the job name, the launch command,
and the DataParallelJob + ConfigMap it creates. No cluster."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.manifest import (
    DEFAULT_IMAGES,
    SOURCE_MOUNT,
    RunOptions,
    build_job,
    build_source_configmap,
    job_name_for,
    launch_command,
)
from dpjob_cli.pack import CONFIGMAP_LIMIT, config_key, human_size, pack
from dpjob_operator.api.spec import parse_job

pytestmark = pytest.mark.unit
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("script, expected", [
    ("train.py", "train-abcde"),
    ("path/to/Train_ResNet50.py", "train-resnet50-abcde"),
    ("2stage.py", "job-2stage-abcde"),          # a name must start with a letter
    ("___.py", "job-abcde"),
    ("a" * 80 + ".py", "a" * 30 + "-abcde"),     # short enough for '<name>-rank-<i>' pod names
])
def test_job_name_is_a_dns_label_from_the_script_name(script, expected):
    name = job_name_for(script, "abcde")
    assert name == expected and DNS_1035.match(name)


def test_job_names_differ_between_runs_of_the_same_script():
    assert len({job_name_for("train.py") for _ in range(20)}) == 20


@pytest.mark.parametrize("framework, procs, expected", [
    ("pytorch", 1, ["python", "/s/t.py", "--lr", "0.1"]),
    ("pytorch", 8, ["torchrun", "/s/t.py", "--lr", "0.1"]),     # torchrun reads the operator's PET_*
    ("oneflow", 1, ["python", "/s/t.py", "--lr", "0.1"]),
    ("oneflow", 4, ["python", "-m", "oneflow.distributed.launch", "--nproc_per_node", "$(DPJOB_NPROC_PER_NODE)",
                    "--nnodes", "$(DPJOB_REPLICAS)", "--node_rank", "$(DPJOB_NODE_RANK)", "--master_addr",
                    "$(DPJOB_MASTER_ADDR)", "--master_port", "$(DPJOB_MASTER_PORT)", "/s/t.py", "--lr", "0.1"]),
    ("mindspore", 8, ["msrun", "--worker_num=$(MS_WORKER_NUM)", "--local_worker_num=$(MS_LOCAL_WORKER)",
                      "--master_addr=$(MS_SCHED_HOST)", "--master_port=$(MS_SCHED_PORT)",
                      "--node_rank=$(MS_NODE_RANK)", "--join=True", "/s/t.py", "--lr", "0.1"]),
])
def test_launch_command_per_framework_and_process_count(framework, procs, expected):
    opts = RunOptions(script="t.py", args=("--lr", "0.1"), framework=framework, procs=procs)
    assert launch_command(opts, "/s/t.py") == expected


def test_user_arguments_are_not_expanded_by_kubernetes():
    opts = RunOptions(script="t.py", args=("--out", "$(HOME)/x"))
    assert launch_command(opts, "/s/t.py")[-1] == "$$(HOME)/x"


def packed_script(tmp_path: Path, text: str = "print('hi')\n", name: str = "train.py") -> Path:
    script = tmp_path / name
    script.write_text(text)
    return script


def test_single_script_is_one_configmap_key_mounted_at_its_name(tmp_path):
    packed = pack(packed_script(tmp_path))
    assert packed.entry == "train.py" and packed.data == {"train.py": "print('hi')\n"}
    assert packed.items == (("train.py", "train.py"),) and packed.size == 12


def test_directory_keeps_its_layout_and_leaves_caches_and_hidden_files_home(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / ".env").write_text("SECRET=1\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref\n")
    (tmp_path / "weights.bin").write_bytes(b"\xff\xfe\x00")
    script = packed_script(tmp_path / "pkg", name="train.py")
    packed = pack(script, tmp_path)
    assert packed.entry == "pkg/train.py"
    assert sorted(path for _, path in packed.items) == ["pkg/model.py", "pkg/train.py", "weights.bin"]
    keys = {path: key for key, path in packed.items}
    assert all(re.match(r"^[-._a-zA-Z0-9]+$", key) for key in keys.values())
    assert base64.b64decode(packed.binary_data[keys["weights.bin"]]) == b"\xff\xfe\x00"


def test_keys_stay_unique_when_flattened_paths_collide():
    taken: set[str] = set()
    assert [config_key(p, taken) for p in ("a/b.py", "a__b.py", "a b.py")] == ["a__b.py", "a__b.py-1", "a_b.py"]


@pytest.mark.parametrize("make, what", [
    (lambda d: (d / "nope.py", None, None), "no such script: "),
    (lambda d: (packed_script(d), d / "missing-dir", None), "no such directory: "),
    (lambda d: (packed_script(d), None, d / "req.txt"), "no such requirements file: "),
    (lambda d: (packed_script(d), d / "pkg", None) if (d / "pkg").mkdir() is None else None, "is not inside --dir"),
])
def test_bad_input_is_one_line_with_exit_code_7(tmp_path, make, what):
    with pytest.raises(CliError) as err:
        pack(*make(tmp_path))
    assert err.value.code == ExitCode.BAD_INPUT and what in err.value.message and "\n" not in err.value.message


def test_too_big_for_a_configmap_says_how_big_and_suggests_an_image(tmp_path):
    script = packed_script(tmp_path)
    (tmp_path / "data.bin").write_bytes(b"\x00" * CONFIGMAP_LIMIT)
    with pytest.raises(CliError) as err:
        pack(script, tmp_path)
    assert err.value.code == ExitCode.BAD_INPUT
    assert "1 MiB a ConfigMap can hold" in err.value.message and "--image" in err.value.message
    assert f"--dir {tmp_path} (2 files) is 1.00 MiB, over the 1 MiB" in err.value.message


@pytest.mark.parametrize("size, text", [(300, "300 B"), (2048, "2 KiB"), (1024 * 1024, "1 MiB"),
                                        (1100000, "1.05 MiB")])
def test_sizes_read_like_a_person_writes_them(size, text):
    assert human_size(size) == text


def test_job_runs_the_packed_script_and_passes_the_operators_parser(tmp_path):
    opts = RunOptions(script=str(packed_script(tmp_path)), args=("--epochs", "3"), namespace="team-a",
                      replicas=2, env=(("A", "1"),), cpu="300m", memory="1Gi")
    packed = pack(Path(opts.script), requirements=packed_script(tmp_path, "numpy\n", "req.txt"))
    job = build_job(opts, "train-x", packed)
    ctr = job["spec"]["template"]["spec"]["containers"][0]
    assert ctr["name"] == "trainer" and ctr["image"] == DEFAULT_IMAGES["cpu"]
    assert ctr["command"][:2] == ["sh", "-c"] and "pip install" in ctr["command"][2]
    assert ctr["command"][3:] == ["python", f"{SOURCE_MOUNT}/train.py", "--epochs", "3"]
    assert {e["name"]: e["value"] for e in ctr["env"]} == {
        "DPJOB_SRC": SOURCE_MOUNT, "DPJOB_REQUIREMENTS": f"{SOURCE_MOUNT}/_dpjob/requirements.txt", "A": "1"}
    assert ctr["resources"] == {"requests": {"cpu": "300m", "memory": "1Gi"}}
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["configMap"]["name"] == "train-x-src"
    assert {i["path"] for i in volume["configMap"]["items"]} == {"train.py", "_dpjob/requirements.txt"}
    assert job["spec"]["runPolicy"] == {"backoffLimit": 0}
    parsed = parse_job(job)  # what the operator will see, defaults aside
    assert parsed.spec.replicas == 2 and parsed.namespace == "team-a"


def test_configmap_is_owned_by_the_job_only_once_the_job_has_a_uid(tmp_path):
    packed = pack(packed_script(tmp_path))
    job = build_job(RunOptions(script="train.py"), "train-x", packed)
    assert "ownerReferences" not in build_source_configmap(job, packed)["metadata"]
    job["metadata"]["uid"] = "1234"
    cm = build_source_configmap(job, packed)
    assert cm["metadata"]["ownerReferences"] == [{"apiVersion": "dpjob.io/v1alpha1", "kind": "DataParallelJob",
                                                  "name": "train-x", "uid": "1234", "controller": False,
                                                  "blockOwnerDeletion": False}]
    assert cm["data"] == {"train.py": "print('hi')\n"}


def test_in_image_packs_nothing_and_runs_the_path_inside_the_image():
    opts = RunOptions(script="/app/train.py", image="example.org/me/train:1", in_image=True, procs=2,
                      accelerator="gpu")
    job = build_job(opts, "train-x", None)
    pod = job["spec"]["template"]["spec"]
    assert "volumes" not in pod and pod["containers"][0]["command"] == ["torchrun", "/app/train.py"]
    assert pod["containers"][0]["image"] == "example.org/me/train:1"
