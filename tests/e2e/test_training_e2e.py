"""End to end for real: the operator creates rank pods, the node agent runs them as processes
in their own network namespaces, the trainer forms a torch DDP group over gloo, and a real
Prometheus discovers and scrapes it. What a user of `make dev` would see."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
import yaml

from devcluster import cluster as devcluster
from devcluster import prometheus as promsupport
from devcluster import stack
from tests import dpj
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def agent(cluster):
    proc = stack.existing("nodeagent")
    started = proc is None
    if started:
        proc = stack.start_agent(sys.executable, nodes=2)
    yield proc
    if started:
        proc.stop()


@pytest.fixture(scope="module")
def prom(cluster, operator):
    port = _free_port()
    proc = stack.start_prometheus(port, [f"127.0.0.1:{operator.metrics_port}"], name="prometheus-e2e")
    yield port
    proc.stop()


def trainer_job(name: str, args: list[str], replicas: int = 2, **spec) -> dict:
    job = {"apiVersion": "dpjob.io/v1alpha1", "kind": "DataParallelJob", "metadata": {"name": name},
           "spec": {"replicas": replicas, "accelerator": "cpu",
                    "template": {"spec": {"containers": [{"name": "trainer", "image": "dpjob/trainer:cpu",
                                                          "command": ["python", "-m", "dpjob_trainer"],
                                                          "args": args}]}}}}
    job["spec"].update(spec)
    return stack.run_on_agent(job)


def workdir(namespace: str, name: str) -> Path:
    return Path("/tmp/dpjob") / namespace / name


def reports(namespace: str, name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((workdir(namespace, name) / "report").glob("report-rank*.json"))]


def last_instant_with(url: str, promql: str, start: float, end: float) -> float:
    """The latest evaluation time in [start, end] at which ``promql`` returned data."""
    series = promsupport.query_range(url, promql, start, end, step="1s")
    stamps = [float(t) for s in series for t, _ in s["values"]]
    assert stamps, f"{promql} never had data between {start:.0f} and {end:.0f}"
    return max(stamps)


def test_quickstart_trains_to_success_and_is_observed_by_prometheus(api, core, namespace, operator, agent, prom):
    job = stack.run_on_agent(yaml.safe_load((REPO / "examples" / "quickstart-cpu.yaml").read_text()))
    dpj.create(api, namespace, job)
    running = dpj.wait_phase(api, namespace, "quickstart", "Running", timeout=120)
    running_at = time.time()
    st = dpj.wait_phase(api, namespace, "quickstart", "Succeeded", timeout=300)
    assert st["succeededReplicas"] == 2 and st["restarts"] == 0

    if devcluster.GANG_SCHEDULING:  # the DDP group was scheduled as one gang, and the gang is released
        assert running["gang"] == {"podGroup": "quickstart-gang-0", "minCount": 2}
        assert {p.spec.scheduling_group.pod_group_name for p in dpj.rank_pods(core, namespace, "quickstart")} \
            == {"quickstart-gang-0"}
        assert "gang" not in st

    rs = reports(namespace, "quickstart")
    assert [r["rank"] for r in rs] == [0, 1] and all(r["world_size"] == 2 and r["backend"] == "gloo" for r in rs)
    assert len({r["param_sha256"] for r in rs}) == 1, "ranks ended with different parameters"
    assert all(r["final_loss"] < r["initial_loss"] for r in rs), "the loss did not go down"

    # Prometheus discovered both rank pods through the API server and scraped them mid-run.
    series = wait_for("trainer series in Prometheus", lambda: promsupport.query(
        f"http://127.0.0.1:{prom}", f'max_over_time(dpjob_trainer_steps_total{{namespace="{namespace}"}}[10m])'),
        timeout=30)
    assert {s["metric"]["dpjob_rank"] for s in series} == {"0", "1"}
    assert max(float(s["value"][1]) for s in series) == 300

    # Every panel query of both dashboards returns data for this run (issue 6). Evaluate them at
    # the last instant both ranks were being scraped: once the pods finish, their series go stale,
    # and how long the run lasted depends on the machine.
    url = f"http://127.0.0.1:{prom}"
    at = last_instant_with(url, f'count(dpjob_trainer_info{{namespace="{namespace}"}}) == 2',
                           start=running_at - 60, end=time.time())
    empty = []
    for dashboard, title, expr in promsupport.dashboard_queries(
            values={"namespace": namespace, "job": "quickstart", "operator": "dpjob-operator",
                    "__rate_interval": "1m", "__interval": "5s"}):
        result = promsupport.query(url, expr, at)
        if not result:
            result = promsupport.query(url, expr)
        if not result:
            empty.append(f"{dashboard} / {title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_linear_task_converges_to_the_oneflow_solution(api, namespace, operator, agent):
    name = "linear"
    dpj.create(api, namespace, trainer_job(name, ["--task", "linear", "--metrics-port", "0",
                                                   "--report", f"/tmp/dpjob/{namespace}/{name}/report"]))
    dpj.wait_phase(api, namespace, name, "Succeeded", timeout=240)
    rs = reports(namespace, name)
    assert len(rs) == 2 and len({r["param_sha256"] for r in rs}) == 1
    w = rs[0]["weights"]
    assert w == pytest.approx([2.0, 3.0], abs=0.05)


def _trainer_pids(namespace: str, name: str, rank: int) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(kv.split("=", 1) for kv in (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in kv)
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if env.get("DPJOB_NAMESPACE") == namespace and env.get("DPJOB_NAME") == name and \
                env.get("DPJOB_NODE_RANK") == str(rank) and b"dpjob_trainer" in cmd:
            pids.append(int(proc.name))
    return pids


def test_killed_rank_gang_restarts_and_resumes_from_the_checkpoint(api, namespace, operator, agent):
    name = "resume"
    base = f"/tmp/dpjob/{namespace}/{name}"
    steps = 600
    dpj.create(api, namespace, trainer_job(name, [
        "--task", "mlp", "--steps", str(steps), "--checkpoint-every", "25", "--checkpoint-dir", f"{base}/ckpt",
        "--report", f"{base}/report", "--metrics-port", "0", "--log-every", "25"],
        runPolicy={"backoffLimit": 2}))
    dpj.wait_phase(api, namespace, name, "Running", timeout=120)
    wait_for("a checkpoint", lambda: any(Path(f"{base}/ckpt").glob("*")), timeout=120, interval=0.5)
    pids = wait_for("rank 1's trainer process", lambda: _trainer_pids(namespace, name, 1), timeout=30)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert st["restarts"] == 1 and st["failureRestarts"] == 1
    assert st["lastFailure"]["rank"] == 1 and st["lastFailure"]["exitCode"] in (137, -9)
    rs = reports(namespace, name)
    assert all(r["steps"] == steps for r in rs)
    assert all(r["resumed_from_step"] > 0 for r in rs), "the restarted gang did not resume from the checkpoint"
    assert len({r["param_sha256"] for r in rs}) == 1
