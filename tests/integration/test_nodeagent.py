"""The node agent against the real local control plane: pods bound to its nodes run as local processes
with their own network namespace, IP, hosts file and volumes, and report status like a kubelet.

Needs root and iproute2. The agent under test uses its own node names, pool, bridge, CIDR and state dir,
so it does not disturb an agent ``make dev`` may be running.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devcluster.nodeagent import AgentProcess
from tests.helpers import kubectl, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"),
                       reason="the node agent needs root, iproute2 and unshare"),
]

REPO = Path(__file__).resolve().parent.parent.parent
TIMEOUT = 30.0


class Agent:
    def __init__(self, proc: AgentProcess, pool: str, prefix: str, bridge: str, gateway: str, python: Path,
                 state_dir: Path, mount_root: str):
        self.proc, self.pool, self.prefix, self.bridge, self.gateway = proc, pool, prefix, bridge, gateway
        self.python, self.state_dir, self.mount_root = python, state_dir, mount_root

    def log(self, namespace: str, pod: str, container: str = "main") -> str:
        path = self.proc.logs_file(namespace, pod, container)
        return path.read_text() if path.exists() else ""

    def agent_log(self) -> str:
        return self.proc.log_path.read_text() if self.proc.log_path.exists() else ""


@pytest.fixture(scope="module")
def agent(cluster, core, tmp_path_factory):
    rnd = uuid.uuid4().hex[:5]
    state = tmp_path_factory.mktemp(f"nodeagent-{rnd}")
    # The pods' python: a symlink in a directory of its own, to see that --python goes first on PATH.
    bindir = state / "podbin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    octet = random.randint(0, 254)
    cidr, gateway = f"10.253.{octet}.0/24", f"10.253.{octet}.1"
    pool = prefix = f"it-{rnd}"
    bridge = f"dpjt{rnd}"
    proc = AgentProcess(cluster, state / "agent.log", state_dir=state, nodes=1, name_prefix=prefix, pool=pool,
                        bridge=bridge, cidr=cidr, pod_python=str(bindir / "python"), kubelet_port=10250)
    proc.start(timeout=60)
    a = Agent(proc, pool, prefix, bridge, gateway, bindir / "python", state, f"/tmp/dpjob-it-{rnd}")
    try:
        yield a
    finally:
        rc = proc.stop(timeout=60)
        log = a.agent_log()
        leftovers = subprocess.run(["ip", "-o", "link", "show", "master", bridge], capture_output=True, text=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        shutil.rmtree(a.mount_root, ignore_errors=True)
        assert rc == 0, f"agent exited with {rc}:\n{log[-3000:]}"
        assert not leftovers.stdout.strip(), f"veths left on {bridge}: {leftovers.stdout}"

        def node_gone():
            try:
                core.read_node(f"{prefix}-0")
                return False
            except ApiException as exc:
                return exc.status == 404
        wait_for("the agent's node to be deleted", node_gone, TIMEOUT)


def pod(pool: str, name: str, command: list[str], **spec) -> client.V1Pod:
    """A pod for the agent's pool: selects its nodes and tolerates their taint."""
    container = {"name": "main", "image": "none", "command": command}
    container.update(spec.pop("container", {}))
    body = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 10,
                 "nodeSelector": {"dpjob.io/pool": pool},
                 "tolerations": [{"key": "dpjob.io/agent", "operator": "Exists", "effect": "NoSchedule"}],
                 "automountServiceAccountToken": False, **spec},
    }
    return client.V1Pod.from_dict(body)


def wait_phase(core, namespace: str, name: str, *phases: str, timeout: float = TIMEOUT):
    def check():
        p = core.read_namespaced_pod(name, namespace)
        return p if p.status.phase in phases else None
    try:
        return wait_for(f"pod {name} to be {'/'.join(phases)}", check, timeout)
    except AssertionError:
        p = core.read_namespaced_pod(name, namespace)
        raise AssertionError(f"pod {name} is {p.status.phase}: {p.status}") from None


def wait_running_ip(core, namespace: str, name: str) -> str:
    p = wait_phase(core, namespace, name, "Running")
    assert p.status.pod_ip and p.status.host_ip
    return p.status.pod_ip


def test_exit_code_status_and_logs(agent, core, namespace):
    core.create_namespaced_pod(namespace, pod(agent.pool, "exit3",
                                              ["sh", "-c", "echo hello; echo to-stderr >&2; exit 3"]))
    p = wait_phase(core, namespace, "exit3", "Failed", "Succeeded")
    assert p.status.phase == "Failed"
    term = p.status.container_statuses[0].state.terminated
    assert term.exit_code == 3 and term.reason == "Error" and term.started_at and term.finished_at
    assert p.spec.node_name == f"{agent.prefix}-0"
    assert "hello" in agent.log(namespace, "exit3") and "to-stderr" in agent.log(namespace, "exit3")
    out = subprocess.run([sys.executable, "-m", "devcluster.nodeagent", "logs", f"{namespace}/exit3",
                          "--state-dir", str(agent.state_dir)], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "hello" in out.stdout, out
    # kubectl logs goes apiserver -> the agent's kubelet-like HTTPS endpoint on the node's InternalIP.
    kl = kubectl("logs", "-n", namespace, "exit3", check=False)
    assert kl.returncode == 0 and "hello" in kl.stdout, kl


def test_env_valuefrom_and_configmap_volume(agent, core, namespace):
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cfg"), data={"greeting": "hi-from-cm", "table.json": '{"ranks": 2}'}))
    mount = f"{agent.mount_root}/env/cfg"
    core.create_namespaced_pod(namespace, pod(
        agent.pool, "envpod", ["sh", "-c", 'echo "name=$MY_NAME ns=$MY_NS ip=$MY_IP node=$MY_NODE g=$GREETING x=$(X)"; '
                                      f'cat {mount}/table.json; echo; pwd'],
        container={"env": [
            {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
            {"name": "X", "value": "expanded-$(GREETING)"},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}}}],
            "volumeMounts": [{"name": "cfg", "mountPath": mount}],
            "workingDir": "/nonexistent-dpjob-wd"},
        volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}]))
    p = wait_phase(core, namespace, "envpod", "Succeeded", "Failed")
    log = agent.log(namespace, "envpod")
    assert p.status.phase == "Succeeded", log
    assert (f"name=envpod ns={namespace} ip={p.status.pod_ip} node={agent.prefix}-0 g=hi-from-cm "
            "x=expanded-hi-from-cm") in log
    assert '{"ranks": 2}' in log
    assert "nonexistent-dpjob-wd" in log  # workingDir created under the pod's sandbox


def test_two_pods_listen_on_the_same_port(agent, core, namespace):
    server = ["python", "-m", "http.server", "9090", "--bind", "0.0.0.0"]
    for name in ("web-a", "web-b"):
        core.create_namespaced_pod(namespace, pod(agent.pool, name, server, terminationGracePeriodSeconds=2))
    ips = [wait_running_ip(core, namespace, n) for n in ("web-a", "web-b")]
    assert ips[0] != ips[1]
    for ip in ips:
        def get(ip=ip):
            try:
                return urllib.request.urlopen(f"http://{ip}:9090/", timeout=2).status == 200
            except OSError:
                return False
        wait_for(f"http://{ip}:9090 from the host", get, TIMEOUT)
    ready = core.read_namespaced_pod("web-a", namespace).status.conditions
    assert any(c.type == "Ready" and c.status == "True" for c in ready)


def test_peer_fqdn_resolves_even_if_it_starts_later(agent, core, namespace):
    fqdn = f"rank-1.job.{namespace}.svc.cluster.local"
    resolver = ("import socket, sys, time\n"
                "for _ in range(120):\n"
                "    try:\n"
                f"        print('resolved', socket.gethostbyname('{fqdn}'),"
                " socket.gethostbyname('rank-1.job'), socket.gethostbyname(socket.gethostname())); sys.exit(0)\n"
                "    except OSError:\n"
                "        time.sleep(0.25)\n"
                "sys.exit(1)\n")
    core.create_namespaced_pod(namespace, pod(agent.pool, "rank-0", ["python", "-c", resolver], hostname="rank-0",
                                              subdomain="job"))
    ip0 = wait_running_ip(core, namespace, "rank-0")
    core.create_namespaced_pod(namespace, pod(agent.pool, "rank-1", ["sleep", "30"], hostname="rank-1", subdomain="job",
                                              terminationGracePeriodSeconds=1))
    ip1 = wait_running_ip(core, namespace, "rank-1")
    p = wait_phase(core, namespace, "rank-0", "Succeeded", "Failed")
    log = agent.log(namespace, "rank-0")
    assert p.status.phase == "Succeeded", log
    assert f"resolved {ip1} {ip1} {ip0}" in log


def test_configmap_update_reaches_a_running_pod(agent, core, namespace):
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="rt"), data={"ranktable.json": "v1"}))
    mount = f"{agent.mount_root}/cmupdate"
    script = (f"cat {mount}/ranktable.json; echo; "
              f"while [ \"$(cat {mount}/ranktable.json)\" != v2 ]; do sleep 0.2; done; echo saw-v2")
    core.create_namespaced_pod(namespace, pod(agent.pool, "watcher", ["sh", "-c", script],
                                              container={"volumeMounts": [{"name": "rt", "mountPath": mount,
                                                                           "readOnly": True}]},
                                              volumes=[{"name": "rt", "configMap": {"name": "rt"}}]))
    wait_running_ip(core, namespace, "watcher")
    wait_for("the pod to read v1", lambda: "v1" in agent.log(namespace, "watcher"), TIMEOUT)
    core.patch_namespaced_config_map("rt", namespace, {"data": {"ranktable.json": "v2"}})
    p = wait_phase(core, namespace, "watcher", "Succeeded", "Failed")
    assert p.status.phase == "Succeeded" and "saw-v2" in agent.log(namespace, "watcher")


def test_delete_sends_sigterm_and_removes_the_pod(agent, core, namespace):
    script = "trap 'echo got-sigterm; exit 0' TERM; echo started; while true; do sleep 0.2; done"
    core.create_namespaced_pod(namespace, pod(agent.pool, "victim", ["sh", "-c", script]))
    pod_ip = wait_running_ip(core, namespace, "victim")
    wait_for("the pod to start", lambda: "started" in agent.log(namespace, "victim"), TIMEOUT)
    uid = core.read_namespaced_pod("victim", namespace).metadata.uid
    assert Path(f"/run/netns/dpjob-{uid}").exists()
    core.delete_namespaced_pod("victim", namespace)

    def gone():
        try:
            core.read_namespaced_pod("victim", namespace)
            return False
        except ApiException as exc:
            return exc.status == 404
    wait_for("the deleted pod to disappear", gone, TIMEOUT)
    assert "got-sigterm" in agent.log(namespace, "victim")
    wait_for("the pod's netns to be removed", lambda: not Path(f"/run/netns/dpjob-{uid}").exists(), 10)
    assert pod_ip


def test_pods_use_the_configured_python(agent, core, namespace):
    core.create_namespaced_pod(namespace, pod(agent.pool, "which-python",
                                              ["python", "-c", "import sys; print(sys.executable)"]))
    p = wait_phase(core, namespace, "which-python", "Succeeded", "Failed")
    log = agent.log(namespace, "which-python")
    assert p.status.phase == "Succeeded", log
    assert log.strip() == str(agent.python)


def test_missing_command_fails_clearly(agent, core, namespace):
    body = pod(agent.pool, "nocmd", [])
    body.spec.containers[0].command = None
    core.create_namespaced_pod(namespace, body)
    p = wait_phase(core, namespace, "nocmd", "Failed", "Succeeded")
    term = p.status.container_statuses[0].state.terminated
    assert p.status.phase == "Failed" and "no command" in term.message


def test_agent_log_has_no_tracebacks(agent):
    # One line per pod lifecycle event; none of the tests above may have crashed a worker or a watch.
    assert "Traceback" not in agent.agent_log(), agent.agent_log()[-3000:]


def test_restarted_agent_fails_orphaned_pods_honestly(cluster, core, namespace, tmp_path):
    """An agent killed with SIGKILL leaves processes and a netns behind; the next one kills them, cleans up
    and reports the pod Failed (AgentRestarted) instead of letting it look Running."""
    rnd = uuid.uuid4().hex[:5]
    octet = random.randint(0, 254)
    opts = dict(state_dir=tmp_path, nodes=1, name_prefix=f"rs-{rnd}", pool=f"rs-{rnd}", bridge=f"dprs{rnd}",
                cidr=f"10.249.{octet}.0/24", kubelet_port=0)
    first = AgentProcess(cluster, tmp_path / "agent1.log", **opts).start()
    marker = f"orphan-{rnd}"
    core.create_namespaced_pod(namespace, pod(f"rs-{rnd}", "orphan",
                                              ["python", "-c", "import time; time.sleep(300)", marker]))
    second = None
    try:
        wait_running_ip(core, namespace, "orphan")
        uid = core.read_namespaced_pod("orphan", namespace).metadata.uid
        first.proc.kill()
        first.proc.wait()
        assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
        second = AgentProcess(cluster, tmp_path / "agent2.log", **opts).start()
        p = wait_phase(core, namespace, "orphan", "Failed")
        assert p.status.reason == "AgentRestarted"
        assert p.status.container_statuses[0].state.terminated.reason == "AgentRestarted"
        wait_for("the orphaned process to be killed",
                 lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1, 10)
        assert not Path(f"/run/netns/dpjob-{uid}").exists()
        core.delete_namespaced_pod("orphan", namespace)  # terminal: the agent finishes the deletion
        wait_for("the orphan to be deleted", lambda: not core.list_namespaced_pod(namespace).items, TIMEOUT)
    finally:
        if second:
            assert second.stop() == 0
        for pid in subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)  # only if the test failed before the agent cleaned up
        subprocess.run(["ip", "link", "del", f"dprs{rnd}"], capture_output=True)
