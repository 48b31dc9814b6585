"""Several real nodes: a job's ranks on two nodes training together over the pod network, a node that
dies mid-run (its kubelet stopped; its containerd restarted), and rank pods nobody else can reach
but their scrapers, on the metrics port only.

The module adds ``real-1`` (its own containerd, kubelet, bridge and subnet 10.88.1.0/24) and the
NetworkPolicy engine (devcluster/netpol.py) for its tests, and removes both afterwards, so every
other test keeps the one-node cluster ``make dev`` has. The operator runs as a process on this
host: no drill can stop it with the node it would sit on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from devcluster import netpol, node_changes, stack
from devcluster.real_nodes import node_ready
from devcluster.realnode import TOLERATION
from devcluster.workloads import trainer_image, trainer_mindspore_image
from tests.support import cluster as dpj
from tests.support.cluster import lease_holder
from tests.support.operator import dev_lease
from tests.support.paths import EXAMPLES
from tests.support.realnode_jobs import log_events, reports, trainer_job, wait_log_event, workdir
from tests.support.waits import wait_until

# The MindSpore image is built by its own e2e module first (cached); a cold machine builds it here.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
SECOND = "real-1"
METRICS_PORT = 9090  # the trainer's metrics port when the template names none (DPJOB_METRICS_PORT)


@pytest.fixture(scope="module")
def two_nodes(cluster, api) -> Iterator[list[str]]:
    if not node_changes.running_nodes():
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")
    node_changes.add_node(1)
    netpol.install()
    # A new node pulls the multi-GB trainer images on its first pod: ranks on the other node would
    # wait for it past their rendezvous timeout. Pull them first, as an image pre-puller would, both
    # at once (the kubelet pulls in parallel: serializeImagePulls is off).
    prepull(client.CoreV1Api(api), SECOND, trainer_image(), trainer_mindspore_image())
    yield ["real-0", SECOND]
    netpol.uninstall()
    node_changes.remove_node(1)


# The chart's default scrapers (helm/dpjob-operator/values.yaml networkPolicy.metricsFrom): pods
# labelled as Prometheus, in any namespace, may open a rank pod's metrics ports, and nothing else.
SCRAPERS = {"app.kubernetes.io/name": "prometheus"}


@pytest.fixture(scope="module")
def scraped_operator(_operator_process, tmp_path_factory) -> Iterator[None]:
    """The shared operator, configured as the chart configures it: its jobs' NetworkPolicies admit
    the scrapers on the metrics ports. Restored (and restarted) after the module."""
    config = tmp_path_factory.mktemp("operator") / "config.json"
    config.write_text(json.dumps({"networkPolicyMetricsFrom": [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": SCRAPERS}}]}))
    _operator_process.extra_env["DPJOB_CONFIG"] = str(config)
    _operator_process.restart_if_running()
    yield
    _operator_process.extra_env.pop("DPJOB_CONFIG", None)
    _operator_process.restart_if_running()


def prepull(core, node: str, *images: str, namespace: str = "default") -> None:
    """Run a no-op container of each image on ``node`` to its end, all at once: the node then holds
    every one of them."""
    names = []
    for image in images:
        name = f"prepull-{abs(hash((node, image))) % 10**8}"
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "nodeName": node, "tolerations": [dict(TOLERATION)],
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "pull", "image": image, "command": ["python", "-c", "pass"],
                                     "imagePullPolicy": "IfNotPresent"}]}})
        names.append(name)
    try:
        for name, image in zip(names, images, strict=True):
            wait_until(lambda n=name: core.read_namespaced_pod(n, namespace).status.phase in ("Succeeded", "Failed"),
                       timeout=900, interval=1, what=f"{image} pulled on {node}")
    finally:
        for name in names:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def spread(job: dict, hard: bool = True) -> dict:
    """One rank per real node as far as the skew allows (the scheduler's topology spread)."""
    labels = {"dpjob.io/job-name": job["metadata"]["name"]}
    job["spec"]["template"]["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels},
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway"}]
    return job


def nodes_of(core, namespace: str, name: str, restart: int | None = None) -> dict[int, str]:
    pods = [p for p in dpj.rank_pods(core, namespace, name) if not p.metadata.deletion_timestamp
            and (restart is None or p.metadata.labels.get("dpjob.io/restart") == str(restart))]
    return {int(p.metadata.labels["dpjob.io/rank"]): p.spec.node_name for p in pods if p.spec.node_name}


CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("connected")
except OSError as e:
    print(f"refused or dropped: {e}")
    sys.exit(3)
"""


SCRAPE = """
import sys, urllib.request
try:
    body = urllib.request.urlopen(f"http://{sys.argv[1]}:{sys.argv[2]}/metrics", timeout=5).read().decode()
except OSError as e:
    print(f"refused or dropped: {e}")
    sys.exit(3)
sys.exit(0 if "dpjob_trainer_" in body else 4)
"""


def start_probe(core, namespace: str, name: str, ip: str, port: int, node: str,
                labels: dict[str, str] | None = None, script: str = CONNECT) -> tuple[str, str]:
    """A pod of the trainer image on ``node`` that opens a TCP connection to ip:port (``SCRAPE``:
    reads the trainer's metrics there, as Prometheus does)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "probe"}},
           "spec": {"restartPolicy": "Never", "nodeName": node, "tolerations": [dict(TOLERATION)],
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "probe", "image": trainer_image(), "command": ["python", "-c", script],
                                    "args": [ip, str(port)], "imagePullPolicy": "IfNotPresent"}]}}
    core.create_namespaced_pod(namespace, pod)
    return namespace, name


def connected(core, probe: tuple[str, str]) -> bool:
    """Whether the probe pod could connect: it Succeeded (connected) or Failed (refused or dropped)."""
    namespace, name = probe
    phase = wait_until(lambda: (lambda p: p if p in ("Succeeded", "Failed") else None)(
        core.read_namespaced_pod(name, namespace).status.phase), timeout=90, interval=0.5,
        what=f"probe {namespace}/{name} to finish")
    return phase == "Succeeded"


def paced_job(name: str, namespace: str, steps: int, pace: float, replicas: int = 2) -> dict:
    base = workdir(namespace, name)
    return spread(trainer_job(name, [
        "--task", "mlp", "--steps", str(steps), "--checkpoint-every", "50", "--checkpoint-dir", f"{base}/ckpt",
        "--report", f"{base}/report", "--log-every", "50", "--slow-rank", "0", "--slow-seconds", str(pace)],
        replicas=replicas, backoff_limit=2))


def test_four_ranks_on_two_nodes_train_together_and_only_their_own_job_reaches_them(
        api, core, namespace, scraped_operator, operator, two_nodes):
    name, steps = "spread", 500
    dpj.create(api, namespace, paced_job(name, namespace, steps, pace=0.1, replicas=4))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    placed = nodes_of(core, namespace, name)
    assert sorted(placed.values()) == ["real-0", "real-0", "real-1", "real-1"], placed
    rank0 = next(p for p in dpj.rank_pods(core, namespace, name) if p.metadata.labels["dpjob.io/rank"] == "0")
    ip, port = rank0.status.pod_ip, 29500
    policy = wait_until(lambda: _policy(namespace, name), timeout=30, what="the job's NetworkPolicy")
    wait_log_event(namespace, f"{name}-rank-0", "start", timeout=120, what="rank 0's store up")
    assert policy["spec"]["podSelector"]["matchLabels"]["dpjob.io/job-name"] == name
    assert policy["spec"]["ingress"][1]["ports"] == [{"protocol": "TCP", "port": METRICS_PORT}], policy

    # Neither a pod of another namespace (on the other node) nor another pod of this namespace can
    # open rank 0's rendezvous port; a pod with the job's labels (no rank label: the operator
    # ignores it) can. A scraper (Prometheus's labels, another namespace) reads the trainer's metrics
    # and cannot open the rendezvous port. The five probe at once, while the job trains.
    other = f"{namespace}-other"
    core.create_namespace({"metadata": {"name": other}})
    try:
        job_labels = {k: rank0.metadata.labels[k] for k in ("dpjob.io/job-name", "app.kubernetes.io/managed-by")}
        probes = {"outsider": start_probe(core, other, "outsider", ip, port, "real-1"),
                  "neighbour": start_probe(core, namespace, "neighbour", ip, port, "real-0"),
                  "insider": start_probe(core, namespace, "insider", ip, port, "real-1", labels=job_labels),
                  "scraper": start_probe(core, other, "scraper", ip, METRICS_PORT, "real-1", labels=SCRAPERS,
                                         script=SCRAPE),
                  "scraper at the store": start_probe(core, other, "scraper-store", ip, port, "real-0",
                                                      labels=SCRAPERS)}
        reached = {who: connected(core, probe) for who, probe in probes.items()}
    finally:
        core.delete_namespace(other)
    assert reached == {"outsider": False, "neighbour": False, "insider": True, "scraper": True,
                       "scraper at the store": False}, reached
    assert dpj.status(api, namespace, name).get("phase") == "Running", "the job ended before every probe ran"

    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
    assert st["restarts"] == 0, st
    rs = reports(namespace, name)
    assert len(rs) == 4 and all(r["steps"] == steps for r in rs)
    assert len({r["param_sha256"] for r in rs}) == 1, "ranks on two nodes ended with different parameters"
    # Each rank's whole log is still there after a run longer than the kubelets' one-minute container
    # GC, on either node (a kubelet removes the log directories of pods it does not run).
    for rank in range(4):
        assert len(log_events(namespace, f"{name}-rank-{rank}", "start")) == 1, f"rank {rank}'s log lost its start"


def test_a_job_that_opts_out_of_isolation_is_reachable_again(api, core, namespace, operator, two_nodes):
    name = "open"
    job = trainer_job(name, ["-c", "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 29500)); "
                             "s.listen(); time.sleep(600)"], command=["python"], replicas=1)
    job["spec"]["isolation"] = "None"
    dpj.create(api, namespace, job)
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    assert _policy(namespace, name) is None
    ip = dpj.rank_pods(core, namespace, name)[0].status.pod_ip
    assert connected(core, start_probe(core, namespace, "neighbour", ip, 29500, "real-1"))


def _policy(namespace: str, name: str) -> dict | None:
    out = dpj.kubectl("get", "networkpolicy", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def test_a_node_whose_kubelet_stops_is_left_and_the_job_resumes_on_the_node_left(
        api, core, namespace, operator, two_nodes):
    name, steps = "survivor", 2500
    dpj.create(api, namespace, paced_job(name, namespace, steps, pace=0.05))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    assert sorted(nodes_of(core, namespace, name).values()) == ["real-0", "real-1"]
    wait_log_event(namespace, f"{name}-rank-0", "start", timeout=60, what="rank 0 training")
    stopped = time.monotonic()
    node_changes.stop_component("kubelet-1")
    try:
        st = dpj.wait_status(api, namespace, name, lambda s: any(
            c["type"] == "NodeLost" and c["status"] == "True" for c in s.get("conditions") or []),
            what="NodeLost", timeout=150)
        lost = time.monotonic() - stopped
        cond = next(c for c in st["conditions"] if c["type"] == "NodeLost")
        assert SECOND in cond["message"], cond
        assert SECOND in (st.get("avoidNodes") or {}).get("nodes", []), st
        assert any(SECOND in e.get("message", "") for e in dpj.wait_event(namespace, name, "NodeLost"))
        resumed = wait_until(lambda: [e for e in log_events(namespace, f"{name}-rank-0", "start")
                                      if e.get("start_step", 0) > 0], timeout=180, interval=0.5,
                             what="the new gang resumed from the checkpoint")
        print(f"kubelet stopped -> NodeLost: {lost:.1f}s; -> training again from step "
              f"{resumed[0]['start_step']}: {time.monotonic() - stopped:.1f}s")
        assert set(nodes_of(core, namespace, name, restart=1).values()) == {"real-0"}
        done = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=300)
        assert done.get("failureRestarts", 0) == 0, "a lost node was charged to the job's restart budget"
        assert done["restartsByReason"] == {"NodeLost": 1}, done
        rs = reports(namespace, name)
        assert len(rs) == 2 and all(r["steps"] == steps and r["resumed_from_step"] > 0 for r in rs), rs
    finally:
        node_changes.revive_component("kubelet-1")
    wait_until(lambda: node_ready(SECOND), timeout=120, what=f"{SECOND} Ready again")


def test_a_node_whose_containerd_restarts_keeps_its_ranks_running(api, core, namespace, operator, two_nodes):
    name, steps = "steady", 300
    wait_until(lambda: node_ready(SECOND), timeout=120, what=f"{SECOND} Ready")
    dpj.create(api, namespace, paced_job(name, namespace, steps, pace=0.1))
    dpj.wait_phase(api, namespace, name, "Running", timeout=180)
    before = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, name)}
    assert sorted(nodes_of(core, namespace, name).values()) == ["real-0", "real-1"]
    wait_log_event(namespace, f"{name}-rank-1", "start", timeout=60, what="rank 1 training")
    node_changes.stop_component("containerd-1")
    node_changes.revive_component("containerd-1")
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=240)
    assert st["restarts"] == 0, st
    assert {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, name)} == before
    assert len({r["param_sha256"] for r in reports(namespace, name)}) == 1


ONE_PER_NODE = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
    "topologyKey": "kubernetes.io/hostname",
    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "dpjob-operator"}}}]}}


def _operator_pods() -> dict[str, str]:
    """Live Helm-installed operator pods: name -> node."""
    out = dpj.kubectl("-n", stack.OPERATOR_NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=dpjob-operator",
                      "-o", "json")
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in json.loads(out.stdout)["items"]
            if not p["metadata"].get("deletionTimestamp")}


def _leader(pods: dict[str, str]) -> str | None:
    holder = lease_holder(*dev_lease())
    return next((name for name in pods if holder.startswith(f"{name}_")), None)


def test_the_standby_on_the_node_left_takes_over_from_a_leader_whose_node_dies(
        api, core, namespace, _operator_process, _helm_operator, two_nodes):
    _operator_process.stop()  # the two Helm replicas compete for the Lease alone
    stack.install_operator({"affinity": ONE_PER_NODE})
    stack.scale_operator(2)
    try:
        pods = wait_until(lambda: (lambda p: p if sorted(p.values()) == ["real-0", "real-1"] else None)(
            _operator_pods()), timeout=120, what="one operator replica per node")
        leader = wait_until(lambda: _leader(pods), timeout=30, what="a replica to lead")
        if pods[leader] != SECOND:  # a graceful stop releases the Lease: the replica on real-1 takes it
            dpj.kubectl("-n", stack.OPERATOR_NAMESPACE, "delete", "pod", leader)
            pods = wait_until(lambda: (lambda p: p if sorted(p.values()) == ["real-0", "real-1"] else None)(
                _operator_pods()), timeout=120, what="the replica replaced")
            leader = wait_until(lambda: (lambda n: n if n and pods[n] == SECOND else None)(_leader(pods)),
                                timeout=30, what=f"the replica on {SECOND} to lead")
        standby = next(n for n, node in pods.items() if node == "real-0")
        # The ranks run until the test lets them end: once the standby leads, so that it is the new
        # leader that finds the gang Running and writes its end.
        done = workdir(namespace, "kept") / "done"
        done.parent.mkdir(parents=True, exist_ok=True)
        job = trainer_job("kept", ["-c", f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.2)"],
                          command=["python"])
        job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "real-0"
        dpj.create(api, namespace, job)
        dpj.wait_phase(api, namespace, "kept", "Running", timeout=180)
        before = {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, "kept")}

        died = time.monotonic()
        node_changes.stop_node_processes(node_changes.node(1))  # the kubelet, the leader's container, containerd
        wait_until(lambda: lease_holder(*dev_lease()).startswith(f"{standby}_"), timeout=60, interval=0.2,
                   what=f"the standby {standby} to lead")
        print(f"leader's node died -> the standby leads: {time.monotonic() - died:.1f}s")
        done.touch()
        st = dpj.wait_phase(api, namespace, "kept", "Succeeded", timeout=120)
        assert st["restarts"] == 0, st
        assert {p.metadata.name: p.metadata.uid for p in dpj.rank_pods(core, namespace, "kept")} == before, \
            "a rank pod was created twice"
    finally:
        node_changes.add_node(1)
        stack.install_operator()


def test_mindspore_ranks_on_two_nodes_train_together_through_one_scheduler(api, core, namespace, operator,
                                                                           two_nodes):
    """examples/mindspore-cpu.yaml with one rank per node: rank pod 0's msrun hosts the scheduler,
    the worker on the other node reaches it over the pod network, and both end identical."""
    doc = spread(stack.run_on_real_node(yaml.safe_load((EXAMPLES / "mindspore-cpu.yaml").read_text())))
    doc["spec"]["template"]["spec"]["containers"][0]["image"] = stack.trainer_mindspore_image()  # on both nodes
    name = doc["metadata"]["name"]
    dpj.create(api, namespace, doc)
    st = dpj.wait_phase(api, namespace, name, "Succeeded", timeout=420)
    assert st["restarts"] == 0, st
    assert sorted(nodes_of(core, namespace, name).values()) == ["real-0", "real-1"]
    paths = sorted((stack.SHARED_DIR / namespace / name / "report").glob("report-rank*.json"))
    rank0, rank1 = (json.loads(p.read_text()) for p in paths)
    assert rank0["framework"] == "mindspore" and rank0["world_size"] == 2
    assert rank0["param_sha256_steps"] == rank1["param_sha256_steps"], "the ranks' parameters diverged"
