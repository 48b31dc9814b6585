"""End to end for real: the operator runs as a pod installed with Helm from the image built here;
it creates rank pods that the real node's kubelet runs as containers of the trainer image;
the ranks find each other through cluster DNS and train with torch DDP over gloo; Prometheus 3
discovers and scrapes the pods through the API server. What a user of `make dev` sees."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from devcluster import cluster as devcluster
from devcluster import prometheus as promsupport
from devcluster import stack
from tests.support import cluster as dpj
from tests.support.cluster import kubectl
from tests.support.paths import DEVCLUSTER, EXAMPLES
from tests.support.ports import free_port
from tests.support.realnode_jobs import container_pids, log_events, reports, trainer_job, workdir
from tests.support.waits import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def real_node(cluster):
    if not devcluster.NODES:
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")


@pytest.fixture(scope="module")
def prom(cluster):
    port = free_port()
    proc = stack.cluster_prometheus(port, name="prometheus-e2e")
    yield port
    proc.stop()


def last_instant_with(url: str, promql: str, start: float, end: float) -> float:
    """The latest evaluation time in [start, end] at which ``promql`` returned data."""
    series = promsupport.query_range(url, promql, start, end, step="1s")
    stamps = [float(t) for s in series for t, _ in s["values"]]
    assert stamps, f"{promql} never had data between {start:.0f} and {end:.0f}"
    return max(stamps)


def test_quickstart_applied_unchanged_trains_in_containers_and_is_observed(api, core, namespace, operator_pod, prom):
    """helm install -> operator pod Ready -> the README's example to Succeeded in real containers."""
    job = yaml.safe_load((EXAMPLES / "quickstart-cpu.yaml").read_text())
    dpj.create(api, namespace, job)
    running = dpj.wait_phase(api, namespace, "quickstart", "Running", timeout=180)
    running_at = time.time()
    st = dpj.wait_phase(api, namespace, "quickstart", "Succeeded", timeout=300)
    assert st["succeededReplicas"] == 2 and st["restarts"] == 0

    pods = dpj.rank_pods(core, namespace, "quickstart")
    assert {p.spec.node_name for p in pods} <= {n.name for n in devcluster.NODES}, "ranks ran off the real node"
    for pod in pods:  # a real container of the image the example names, with a CNI address
        status = pod.status.container_statuses[0]
        assert status.image_id and status.state.terminated.exit_code == 0
        assert pod.status.pod_ip.startswith("10.88.")
    if devcluster.GANG_SCHEDULING:  # the DDP group was scheduled as one gang, and the gang is released
        assert running["gang"] == {"podGroup": "quickstart-gang-0", "minCount": 2}
        assert "gang" not in st

    # `kubectl logs` of every rank: each trained the whole run and ended with the same parameters.
    done = [log_events(namespace, f"quickstart-rank-{r}", "done") for r in (0, 1)]
    assert all(len(d) == 1 and d[0]["steps"] == 300 for d in done), done
    assert done[0][0]["param_sha256"] == done[1][0]["param_sha256"], "ranks ended with different parameters"

    # Prometheus discovered both rank pods through the API server and scraped them mid-run.
    url = f"http://127.0.0.1:{prom}"
    series = wait_until(lambda: promsupport.query(
        url, f'max_over_time(dpjob_trainer_steps_total{{namespace="{namespace}"}}[10m])'), timeout=30,
        what="trainer series in Prometheus")
    assert {s["metric"]["dpjob_rank"] for s in series} == {"0", "1"}
    assert {s["metric"]["pod"] for s in series} == {"quickstart-rank-0", "quickstart-rank-1"}
    assert max(float(s["value"][1]) for s in series) == 300

    # Every panel query of both dashboards returns data for this run, the operator's panels from the
    # operator pod. Evaluate at the last instant both ranks were being scraped.
    at = last_instant_with(url, f'count(dpjob_trainer_info{{namespace="{namespace}"}}) == 2',
                           start=running_at - 60, end=time.time())
    empty = []
    for dashboard, title, expr in promsupport.dashboard_queries(
            values={"namespace": namespace, "job": "quickstart", "operator": "dpjob-operator",
                    "__rate_interval": "1m", "__interval": "5s"}):
        result = promsupport.query(url, expr, at) or promsupport.query(url, expr)
        if not result:
            empty.append(f"{dashboard} / {title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


PROBE = """
import json, os, socket, time
master = os.environ["MASTER_ADDR"]
hosts = open("/etc/hosts").read()
# Like a trainer's rendezvous, retry: rank 0's record appears once its pod has an IP.
for attempt in range(120):
    try:
        ip = socket.gethostbyname(master)
        break
    except OSError:
        time.sleep(0.5)
print(json.dumps({"event": "probe", "rank": int(os.environ["RANK"]), "master": master,
                  "ip": ip, "attempts": attempt + 1,
                  "in_hosts_file": master in hosts, "uid": os.getuid()}), flush=True)
from http.server import HTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"rank " + os.environ["RANK"].encode())
HTTPServer(("0.0.0.0", 9090), H).serve_forever()
"""


def test_ranks_resolve_each_other_through_cluster_dns_and_kubectl_exec_and_port_forward_work(
        api, core, namespace, operator_pod):
    name = "probe"
    dpj.create(api, namespace, trainer_job(name, ["-c", PROBE], command=["python"]))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    pods = {p.metadata.name: p for p in dpj.rank_pods(core, namespace, name)}
    rank0_ip = pods[f"{name}-rank-0"].status.pod_ip
    probes = wait_until(lambda: (lambda found: found if len(found) == 2 else None)(
        [e for r in (0, 1) for e in log_events(namespace, f"{name}-rank-{r}", "probe")]), timeout=120,
        what="both ranks' DNS probes")
    fqdn = f"{name}-rank-0.{name}.{namespace}.svc.cluster.local"
    assert {p["master"] for p in probes} == {fqdn}
    assert all(p["ip"] == rank0_ip for p in probes), probes
    # The kubelet's /etc/hosts names a pod itself (hostname + subdomain), so rank 0 finds its own
    # name there; every other rank must find rank 0 through CoreDNS.
    assert not any(p["in_hosts_file"] for p in probes if p["rank"] != 0), "resolved from a hosts file, not cluster DNS"

    # The trainer image runs as its non-root user, on a read-only root filesystem.
    assert {p["uid"] for p in probes} == {10001}
    touch = kubectl("exec", "-n", namespace, f"{name}-rank-1", "-c", "trainer", "--", "python", "-c",
                    "open('/opt/x', 'w')", check=False)
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr, touch.stderr
    resolved = kubectl("exec", "-n", namespace, f"{name}-rank-1", "-c", "trainer", "--", "python", "-c",
                       f"import socket; print(socket.gethostbyname('{fqdn}'))")
    assert resolved.stdout.strip() == rank0_ip

    port = free_port()
    forward = subprocess.Popen([str(DEVCLUSTER / "bin" / "kubectl"), "--kubeconfig",
                                str(devcluster.KUBECONFIG), "port-forward", "-n", namespace, f"pod/{name}-rank-1",
                                f"{port}:9090"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        body = wait_until(lambda: _get(f"http://127.0.0.1:{port}/"), timeout=30, what="the port-forwarded rank")
        assert body == "rank 1"
    finally:
        forward.terminate()
        forward.wait(10)


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return None


def test_linear_task_converges_to_the_oneflow_solution(api, namespace, operator_pod):
    name = "linear"
    dpj.create(api, namespace, trainer_job(name, ["--task", "linear", "--metrics-port", "0",
                                                   "--report", f"{workdir(namespace, name)}/report"]))
    dpj.wait_phase(api, namespace, name, "Succeeded", timeout=240)
    rs = reports(namespace, name)
    assert len(rs) == 2 and len({r["param_sha256"] for r in rs}) == 1
    assert rs[0]["weights"] == pytest.approx([2.0, 3.0], abs=0.05)


def test_a_rank_container_killed_with_sigkill_recreates_the_gang_which_resumes_from_the_checkpoint(
        api, core, namespace, operator_pod):
    name = "resume"
    base = workdir(namespace, name)
    steps = 600
    job = trainer_job(name, [
        "--task", "mlp", "--steps", str(steps), "--checkpoint-every", "25", "--checkpoint-dir", f"{base}/ckpt",
        "--report", f"{base}/report", "--metrics-port", "0", "--log-every", "25"],
        backoff_limit=2)
    job["spec"]["runPolicy"]["restartStrategy"] = "Recreate"
    dpj.create(api, namespace, job)
    assert dpj.wait_phase(api, namespace, name, "Running", timeout=180)["restartStrategy"] == "Recreate"
    first = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, name)}
    wait_until(lambda: any(Path(f"{base}/ckpt").glob("*")), timeout=120, interval=0.5, what="a checkpoint")
    pids = wait_until(lambda: container_pids(namespace, name, 1), timeout=30, what="rank 1's trainer process")
    for pid in pids:  # pid 1 of the container: the container dies with it
        os.kill(pid, signal.SIGKILL)
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert st["restarts"] == 1 and st["failureRestarts"] == 1 and st["restartsByStrategy"] == {"Recreate": 1}
    assert st["lastFailure"]["rank"] == 1 and st["lastFailure"]["exitCode"] == 137
    now = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, name)}
    assert not set(first.values()) & set(now.values()), "Recreate kept a pod of the failed gang"
    rs = reports(namespace, name)
    assert all(r["steps"] == steps for r in rs)
    assert all(r["resumed_from_step"] > 0 for r in rs), "the restarted gang did not resume from the checkpoint"
    assert len({r["param_sha256"] for r in rs}) == 1


def test_the_operator_container_killed_mid_run_comes_back_without_disturbing_the_job(api, core, namespace,
                                                                                       operator_pod):
    name = "steady"  # ranks that run until the test lets them end: once the operator is back
    done = workdir(namespace, name) / "done"
    done.parent.mkdir(parents=True, exist_ok=True)
    dpj.create(api, namespace, trainer_job(name, [
        "-c", f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.2)"], command=["python"]))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    before = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, name)}
    op_uid, op_restarts = operator_pod["metadata"]["uid"], _restart_count(operator_pod)
    for pid in _operator_pids():
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: (lambda p: p and p["metadata"]["uid"] == op_uid and _restart_count(p) > op_restarts
                        and _ready(p))(stack.operator_pod()), timeout=120,
               what="the kubelet to restart the operator container")
    done.touch()
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert st["restarts"] == 0, "the operator's restart disturbed the gang"
    after = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, name)}
    assert after == before, "the restarted operator replaced running ranks"


def _restart_count(pod: dict) -> int:
    return sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses", []))


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _operator_pids() -> list[int]:
    """The operator container's main process (``python -m dpjob_operator`` run as uid 65532)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            uid = int(next(line for line in (proc / "status").read_text().splitlines()
                           if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if b"dpjob_operator" in cmd and uid == 65532:
            pids.append(int(proc.name))
    assert pids, "no operator container process found on this host"
    return pids
