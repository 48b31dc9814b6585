"""`dpjob run` for real: a plain torch DDP script on a laptop becomes a DataParallelJob whose ranks run
as containers of the trainer image on the dev cluster's real node (operator installed with Helm);
the CLI streams both ranks' lines and exits with the job's result. A failing script exits non-zero
naming the failing rank; Ctrl-C leaves the job running; `kubectl dpj` is a kubectl plugin."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from devcluster import cluster as devcluster
from devcluster import stack
from tests.support import cluster as dpj
from tests.support.paths import DEVCLUSTER, KUBECONFIG, REPO
from tests.support.waits import wait_until

pytestmark = pytest.mark.e2e
SOURCE = os.pathsep.join(str(REPO / p) for p in ("cli", "operator", "."))
VENV_BIN = Path(sys.executable).parent

DDP = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT come from the operator
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.full((8, 4), float(rank + 1))).pow(2).mean().backward()  # different data on every rank
optimizer.step()
weights = sum(p.detach().sum().item() for p in model.parameters())
print(f"rank {rank} of {world}: one DDP step, weights {weights:.6f}", flush=True)
dist.barrier()  # no rank tears its process group down while another still uses it
dist.destroy_process_group()
"""

FAILS_ON_RANK_1 = """\
import os, sys, time
rank = int(os.environ["RANK"])
if rank == 1:
    print("rank 1 fails on purpose", flush=True)
    sys.exit(3)
time.sleep(5)
print("rank 0 done", flush=True)
"""

TICKS = """\
import time
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(1)
"""


@pytest.fixture(scope="module", autouse=True)
def real_node_with_trainer_image(cluster):
    if not devcluster.NODES:
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")
    stack.trainer_image()  # built and pushed; the node pulls the default ghcr.io/dpjob/trainer:cpu through its mirror


def env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(KUBECONFIG), "PYTHONPATH": SOURCE}


def dpjob(*args: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dpjob_cli", *args], capture_output=True, text=True, env=env(),
                          timeout=timeout)


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


RESOURCES = ("--cpu", "300m", "--memory", "512Mi")


def test_run_a_torch_ddp_script_to_succeeded_with_both_ranks_lines(api, core, namespace, operator_pod, tmp_path):
    run = dpjob("-n", namespace, "run", script(tmp_path, "ddp.py", DDP), "--name", "ddp", "--replicas", "2",
                *RESOURCES, "--follow", "--timeout", "300")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[0] == "dataparalleljob.dpjob.io/ddp created"
    steps = dict(re.findall(r"^\[rank (\d)\] rank \1 of 2: one DDP step, weights (\S+)$", run.stdout, re.M))
    assert set(steps) == {"0", "1"}, run.stdout
    assert steps["0"] == steps["1"], f"DDP left the ranks with different weights: {steps}"
    assert run.stderr.strip().splitlines()[-1] == "[dpjob] job ddp Succeeded"

    view = json.loads(dpjob("-n", namespace, "status", "ddp", "-o", "json").stdout)
    assert view["phase"] == "Succeeded"
    assert [(r["rank"], r["exitCode"]) for r in view["ranks"]] == [(0, 0), (1, 0)]
    assert {p.spec.node_name for p in dpj.rank_pods(core, namespace, "ddp")} <= {n.name for n in devcluster.NODES}

    # The script's ConfigMap is owned by the job, so deleting the job takes it along.
    job = dpj.get(api, namespace, "ddp")
    cm = core.read_namespaced_config_map("ddp-src", namespace)
    assert [(o.kind, o.uid) for o in cm.metadata.owner_references] == [("DataParallelJob", job["metadata"]["uid"])]

    # The same logs through the kubectl plugin.
    # As a user types it: kubectl refuses flags before a plugin's name, so KUBECONFIG comes from env().
    kubectl = [str(DEVCLUSTER / "bin" / "kubectl")]
    plugin_env = {**env(), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    logs = subprocess.run([*kubectl, "dpj", "-n", namespace, "logs", "ddp", "--all"], capture_output=True,
                          text=True, env=plugin_env, timeout=60)
    assert logs.returncode == 0, logs.stderr
    assert f"[rank 1] rank 1 of 2: one DDP step, weights {steps['1']}" in logs.stdout.splitlines(), logs.stdout

    assert dpjob("-n", namespace, "delete", "ddp").stdout.strip() == "dataparalleljob.dpjob.io/ddp deleted"
    wait_until(lambda: not core.list_namespaced_config_map(namespace, field_selector="metadata.name=ddp-src").items,
               timeout=60, what="the garbage collector to delete the job's ConfigMap")


def test_a_failing_script_exits_non_zero_and_names_the_failing_rank(namespace, operator_pod, tmp_path):
    run = dpjob("-n", namespace, "run", script(tmp_path, "fail.py", FAILS_ON_RANK_1), "--name", "fails",
                "--replicas", "2", *RESOURCES, "--follow", "--timeout", "300")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "[rank 1] rank 1 fails on purpose" in run.stdout.splitlines()
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: job fails failed: rank 1 (fails-rank-1) failed with exit code 3"), run.stderr
    assert "Traceback" not in run.stderr


RAISES_ON_RANK_1 = """\
import os, time
def train(rank: int) -> float:
    return 1 / (rank - 1)  # rank 1 divides by zero
if int(os.environ["RANK"]) == 1:
    train(1)
time.sleep(5)
"""


def test_a_script_that_just_raises_leaves_its_traceback_in_status_and_an_event(api, namespace, operator_pod,
                                                                              tmp_path):
    """No logs needed to see why: the kubelet keeps the traceback (FallbackToLogsOnError)."""
    run = dpjob("-n", namespace, "run", script(tmp_path, "raises.py", RAISES_ON_RANK_1), "--name", "raises",
                "--replicas", "2", *RESOURCES, "--wait", "--timeout", "300")
    assert run.returncode == 1, run.stdout + run.stderr
    last = dpj.status(api, namespace, "raises")["lastFailure"]
    assert (last["rank"], last["container"], last["exitCode"]) == (1, "trainer", 1), last
    assert last["message"].rstrip().endswith("ZeroDivisionError: division by zero"), last["message"]
    assert "return 1 / (rank - 1)" in last["message"]
    rank_failed = dpj.wait_event(namespace, "raises", "RankFailed")
    assert rank_failed and rank_failed[0]["message"].rstrip().endswith("ZeroDivisionError: division by zero")


def _lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))


def test_ctrl_c_while_following_leaves_the_job_running_and_says_how_to_reattach(api, namespace, operator_pod,
                                                                                 tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "dpjob_cli", "-n", namespace, "run",
                             script(tmp_path, "ticks.py", TICKS), "--name", "ticks", *RESOURCES, "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    out: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, out), daemon=True).start()
    seen: list[str] = []

    def ticked_twice() -> bool:
        with contextlib.suppress(queue.Empty):
            seen.append(out.get(timeout=1))
        return "[rank 0] tick 2" in seen

    try:
        wait_until(ticked_twice, timeout=240, interval=0, what="rank 0's second tick")
    except AssertionError:
        proc.kill()
        pytest.fail(f"rank 0 did not tick within 240s; stdout so far: {seen}")
    proc.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends
    assert proc.wait(30) == 130
    stderr = proc.stderr.read() if proc.stderr else ""
    assert f"job ticks keeps running in namespace {namespace}" in stderr
    assert f"Reattach: dpjob logs ticks -n {namespace} --all -f" in stderr and "Traceback" not in stderr
    assert dpj.status(api, namespace, "ticks")["phase"] == "Running"
    assert dpjob("-n", namespace, "delete", "ticks").returncode == 0


def test_kubectl_finds_the_plugin(cluster):
    assert shutil.which("kubectl-dpj", path=str(VENV_BIN)), \
        "kubectl-dpj is missing from the venv: `pip install -e .` installs pyproject's [project.scripts]"
    kubectl = str(DEVCLUSTER / "bin" / "kubectl")
    found = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert str(VENV_BIN / "kubectl-dpj") in found.stdout, found.stdout + found.stderr
    helped = subprocess.run([kubectl, "dpj", "--help"], capture_output=True, text=True, timeout=60,
                            env={**env(), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: kubectl dpj"), helped.stderr
