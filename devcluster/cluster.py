#!/usr/bin/env python3
"""Start and stop dpjob's local Kubernetes cluster from binaries built by ``devcluster/build.sh``:
the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), kwok node pools
for scale and GPU/NPU simulation, and real nodes (kubelet + containerd, kube-proxy, CoreDNS; see
devcluster/realnode.py) where pods run as containers from images built by devcluster/images.sh,
pushed to the cluster's own OCI registry (devcluster/registry.py) and pulled from it by the kubelet.

Why a script of our own instead of kwokctl: this machine has no default container runtime, and
we want exactly the flags that matter for the operator (RBAC, token auth, service-account
signing, high client QPS) with every process started by pid so ``down`` stops only what ``up``
started. Standard library only: it runs before the project's virtual environment exists.

State lives in ``<repo>/.devcluster/``: ``kubeconfig``, ``bin/`` (kubectl, helm), ``logs/``,
``run/`` (pki, etcd data, kwok config) and ``pids/``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import publish, realnode, registry  # noqa: E402

STATE = Path(os.environ.get("DPJOB_DEVCLUSTER_DIR", REPO / ".devcluster"))
RUN, LOGS, PIDS, BIN = STATE / "run", STATE / "logs", STATE / "pids", STATE / "bin"
KUBECONFIG = STATE / "kubeconfig"

ETCD_CLIENT_PORT = int(os.environ.get("DPJOB_ETCD_PORT", "23790"))
ETCD_PEER_PORT = ETCD_CLIENT_PORT + 10
APISERVER_PORT = int(os.environ.get("DPJOB_APISERVER_PORT", "16443"))
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = os.environ.get("DPJOB_POD_CIDR", "10.244.0.0/16")  # 65k pod IPs: room for thousands of pods
# Kubernetes' own gang scheduling (Workload and PodGroup, scheduling.k8s.io/v1alpha2; alpha in 1.35+).
# DPJOB_CLUSTER_GANG_SCHEDULING=0 brings the cluster up without it, like most clusters today (the
# operator's own DPJOB_GANG_SCHEDULING, auto | disabled, is another setting: whether it uses the API).
GANG_SCHEDULING = os.environ.get("DPJOB_CLUSTER_GANG_SCHEDULING", "1") not in ("0", "false", "no")
GANG_FEATURE_GATES = (["--feature-gates=GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"]
                      if GANG_SCHEDULING else [])
# Real nodes (kubelet + containerd): DPJOB_REAL_NODES=0 brings the cluster up with kwok pools only.
REAL_NODES = int(os.environ.get("DPJOB_REAL_NODES", "1"))
NODES = [realnode.RealNode(i, STATE / f"node-{i}") for i in range(REAL_NODES)]
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
NODE_COMPONENTS = tuple(c for n in NODES for c in (f"containerd-{n.index}", f"kubelet-{n.index}")) + \
    (("kube-proxy",) if NODES else ())
# Components started in this order and stopped in reverse.
# The last ones are started by devcluster/stack.py (make dev, e2e tests) and stopped here first.
COMPONENTS = ("registry", *CONTROL_PLANE, "ascend-device-plugin", *NODE_COMPONENTS, "operator", "prometheus")


@dataclass(frozen=True)
class PoolSpec:
    """A simulated node pool: how many kwok nodes and what they look like."""

    name: str
    count: int
    labels: dict[str, str]
    taints: list[dict[str, str]]
    extended: dict[str, str]


def default_pools() -> list[PoolSpec]:
    """The node pools of design section 5; counts come from DPJOB_{GPU,NPU,CPU}_NODES."""
    gpu_count = int(os.environ.get("DPJOB_GPU_NODES", "4"))
    npu_count = int(os.environ.get("DPJOB_NPU_NODES", "4"))
    cpu_count = int(os.environ.get("DPJOB_CPU_NODES", "2"))
    return [
        PoolSpec(
            "gpu", gpu_count,
            {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
             "nvidia.com/gpu.count": "8", "dpjob.io/pool": "gpu"},
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            {"nvidia.com/gpu": "8"},
        ),
        PoolSpec(
            "npu", npu_count,
            {"accelerator": "huawei-Ascend910", "accelerator-type": "module-910b-8",
             "host-arch": "huawei-x86", "dpjob.io/pool": "npu"},
            [{"key": "huawei.com/Ascend910", "effect": "NoSchedule"}],
            {"huawei.com/Ascend910": "8"},
        ),
        PoolSpec("cpu", cpu_count, {"dpjob.io/pool": "cpu"}, [], {}),
    ]


def node_manifest(pool: PoolSpec, index: int) -> dict:
    """One kwok-managed Node with realistic capacity (status is kept on create for Nodes)."""
    name = f"{pool.name}-node-{index}"
    capacity = {"cpu": "96", "memory": "1536Gi", "pods": "110", "ephemeral-storage": "2Ti", **pool.extended}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", **pool.labels},
        },
        "spec": {"taints": pool.taints},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


# --------------------------------------------------------------------------------------------
# process bookkeeping


def log(msg: str) -> None:
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


def read_pid(component: str) -> int | None:
    try:
        return int((PIDS / f"{component}.pid").read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie or a recycled pid does not count
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def profiling_flag() -> str:
    """DPJOB_PROFILE=1: the API server serves Go's pprof (/debug/pprof/profile?seconds=N through
    ``kubectl get --raw``), to say where its CPU goes under a benchmark; off otherwise, as in a
    hardened cluster (CIS 1.2.17)."""
    return f"--profiling={'true' if os.environ.get('DPJOB_PROFILE') == '1' else 'false'}"


def audit_flags() -> list[str]:
    """DPJOB_AUDIT=1: the API server logs who created, deleted and bound which pod (JSON lines in
    .devcluster/logs/audit.log), to tell the operator's requests from the scheduler's, the kubelet's
    (kwok's) and the garbage collector's when a benchmark's request counts do not add up."""
    if os.environ.get("DPJOB_AUDIT") != "1":
        return []
    policy = RUN / "audit-policy.yaml"
    policy.write_text("""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, delete, deletecollection]
  resources: [{group: "", resources: [pods, pods/binding]}]
- level: None
""")
    return [f"--audit-policy-file={policy}", f"--audit-log-path={LOGS / 'audit.log'}", "--audit-log-maxsize=500"]


def start(component: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    """Start one component in its own session (so it survives the caller) and record its pid."""
    with open(LOGS / f"{component}.log", "ab") as logf:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, **(env or {})})
    (PIDS / f"{component}.pid").write_text(str(proc.pid))
    return proc.pid


def wait_until(what: str, check, timeout: float, component: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if component and not alive(read_pid(component)):
            tail = (LOGS / f"{component}.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"{component} exited while waiting for {what}; last log lines:\n{tail}")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            pass
        time.sleep(0.2)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}; see {LOGS}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# --------------------------------------------------------------------------------------------
# certificates and kubeconfig


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def advertise_address() -> str:
    """The host's first non-loopback IP; the apiserver refuses loopback for the kubernetes Endpoints."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
        for ip in out:
            if ":" not in ip and not ip.startswith("127."):
                return ip
    except (OSError, subprocess.SubprocessError):
        pass
    return "127.0.0.1"


def make_pki(adv: str) -> None:
    pki = RUN / "pki"
    if (pki / "apiserver.crt").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", "/CN=dpjob-devcluster-ca",
            "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))
    issue_cert(pki, "apiserver", "/CN=kube-apiserver", "serverAuth", [
        "IP:127.0.0.1", f"IP:{adv}", "IP:10.96.0.1", "DNS:localhost", "DNS:kubernetes",
        "DNS:kubernetes.default", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"])
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    # The API server's client certificate for kubelets (logs, exec, port-forward).
    issue_cert(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", "clientAuth")
    # kube-proxy's identity, bound to system:node-proxier by the default RBAC policy.
    issue_cert(pki, "kube-proxy", "/CN=system:kube-proxy", "clientAuth")
    token = os.urandom(16).hex()
    (RUN / "admin.token").write_text(token)
    (RUN / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")


def issue_cert(pki: Path, name: str, subject: str, usage: str, sans: list[str] | None = None,
               out_dir: Path | None = None) -> None:
    """A key and certificate signed by the cluster CA (``usage``: clientAuth or serverAuth)."""
    out = out_dir or pki
    out.mkdir(parents=True, exist_ok=True)
    ext = out / f"{name}.ext"
    lines = [f"extendedKeyUsage={usage}", "keyUsage=digitalSignature,keyEncipherment"]
    if sans:
        lines.insert(0, "subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(out / f"{name}.key"),
            "-out", str(out / f"{name}.csr"))
    openssl("x509", "-req", "-in", str(out / f"{name}.csr"), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
            "-CAcreateserial", "-days", "3650", "-extfile", str(ext), "-out", str(out / f"{name}.crt"))


def cert_kubeconfig(path: Path, cert: Path, key: Path) -> Path:
    """A kubeconfig that authenticates with a client certificate (kubelet, kube-proxy)."""
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: dpjob-dev
  cluster: {{server: "https://127.0.0.1:{APISERVER_PORT}", certificate-authority: "{RUN / 'pki' / 'ca.crt'}"}}
users:
- name: user
  user: {{client-certificate: "{cert}", client-key: "{key}"}}
contexts:
- name: dpjob-dev
  context: {{cluster: dpjob-dev, user: user}}
current-context: dpjob-dev
""")
    path.chmod(0o600)
    return path


def write_kubeconfig() -> None:
    token = (RUN / "admin.token").read_text().strip()
    ca = RUN / "pki" / "ca.crt"
    KUBECONFIG.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: dpjob-dev
  cluster:
    server: https://127.0.0.1:{APISERVER_PORT}
    certificate-authority: {ca}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: dpjob-dev
  context: {{cluster: dpjob-dev, user: admin, namespace: default}}
current-context: dpjob-dev
""")
    KUBECONFIG.chmod(0o600)


def api_get(path: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(RUN / "pki" / "ca.crt"))
    req = urllib.request.Request(f"https://127.0.0.1:{APISERVER_PORT}{path}",
                                 headers={"Authorization": f"Bearer {(RUN / 'admin.token').read_text().strip()}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=3) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(KUBECONFIG), *args], input=stdin,
                          capture_output=True, text=True, check=check)


# --------------------------------------------------------------------------------------------
# kwok


KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
)

# Our own stages: make a Running pod finish on demand, driven by annotations (docs/devcluster.md).
SIM_STAGES = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: dpjob-sim-complete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.annotations["sim.dpjob.io/complete-after"]', operator: Exists}
  weight: 100
  delay:
    durationMilliseconds: 1000
    durationFrom: {expressionFrom: '.metadata.annotations["sim.dpjob.io/complete-after"]'}
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {lastTransitionTime: {{ $now | Quote }}, status: "False", type: Ready, reason: PodCompleted}
      - {lastTransitionTime: {{ $now | Quote }}, status: "False", type: ContainersReady, reason: PodCompleted}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated: {exitCode: 0, reason: Completed, finishedAt: {{ $now | Quote }}, startedAt: {{ $now | Quote }}}
      {{ end }}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: dpjob-sim-fail}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.annotations["sim.dpjob.io/fail-after"]', operator: Exists}
  weight: 1000
  delay:
    durationMilliseconds: 1000
    durationFrom: {expressionFrom: '.metadata.annotations["sim.dpjob.io/fail-after"]'}
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $annotations := or .metadata.annotations dict }}
      {{ $code := or ( index $annotations "sim.dpjob.io/exit-code" ) 1 }}
      {{ $reason := or ( index $annotations "sim.dpjob.io/reason" ) "Error" }}
      conditions:
      - {lastTransitionTime: {{ $now | Quote }}, status: "False", type: Ready, reason: PodFailed}
      - {lastTransitionTime: {{ $now | Quote }}, status: "False", type: ContainersReady, reason: PodFailed}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{ $code }}
            reason: {{ $reason | Quote }}
            finishedAt: {{ $now | Quote }}
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
"""


def write_kwok_config(stage_dir: Path) -> Path:
    docs = [
        """apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 8
"""
    ]
    for rel in KWOK_STAGE_FILES:
        docs.append((stage_dir / rel).read_text())
    docs.append(SIM_STAGES)
    path = RUN / "kwok.yaml"
    path.write_text("\n---\n".join(d.strip() for d in docs) + "\n")
    return path


# --------------------------------------------------------------------------------------------
# up / down / status


def cluster_is_up() -> bool:
    return all(alive(read_pid(c)) for c in ("registry", *CONTROL_PLANE, *NODE_COMPONENTS)) and \
        KUBECONFIG.exists() and api_get("/readyz")[0] == 200


def up(bin_dir: Path, python: str | None) -> None:
    t0 = time.monotonic()
    for d in (RUN, LOGS, PIDS, BIN):
        d.mkdir(parents=True, exist_ok=True)
    if cluster_is_up():
        log(f"cluster already up (kubeconfig {KUBECONFIG})")
        ensure_device_plugin(python)
        if NODES:  # images whose inputs changed since the node started
            built_images()
        return
    # A half-started or crashed cluster: stop whatever is left and start clean.
    down(quiet=True)
    for d in (RUN, LOGS, PIDS, BIN):
        d.mkdir(parents=True, exist_ok=True)
    for tool in ("kubectl", "helm"):
        link = BIN / tool
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(bin_dir / tool)
    for port in (ETCD_CLIENT_PORT, ETCD_PEER_PORT, APISERVER_PORT):
        if port_open(port):
            raise SystemExit(f"port {port} is already in use by another process; stop it or set DPJOB_ETCD_PORT/"
                             "DPJOB_APISERVER_PORT")
    start_registry(bin_dir)
    adv = advertise_address()
    make_pki(adv)
    write_kubeconfig()
    pki = RUN / "pki"

    etcd_url = f"http://127.0.0.1:{ETCD_CLIENT_PORT}"
    start("etcd", [str(bin_dir / "etcd"), f"--data-dir={RUN / 'etcd'}", "--name=default",
                   f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                   f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                   f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                   f"--initial-cluster=default=http://127.0.0.1:{ETCD_PEER_PORT}",
                   "--unsafe-no-fsync", "--quota-backend-bytes=4294967296", "--log-level=warn"])
    wait_until("etcd", lambda: port_open(ETCD_CLIENT_PORT), 30, "etcd")

    apiserver = [
        # Real nodes' pods reach the API server through the kubernetes Service (advertise address).
        str(bin_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}",
        f"--bind-address={'0.0.0.0' if NODES else '127.0.0.1'}",
        f"--secure-port={APISERVER_PORT}", f"--advertise-address={adv}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={RUN / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC", "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true", profiling_flag(),
        "--max-requests-inflight=800", "--max-mutating-requests-inflight=400", "--event-ttl=2h",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}", "--kubelet-preferred-address-types=InternalIP,Hostname",
        # Let the scale subresource, CEL and server-side apply behave as in a real cluster; nothing to disable.
        *GANG_FEATURE_GATES,
        *(["--runtime-config=scheduling.k8s.io/v1alpha2=true"] if GANG_SCHEDULING else []),
    ]
    if adv.startswith("127."):
        apiserver.append("--endpoint-reconciler-type=none")
    apiserver += audit_flags()
    start("kube-apiserver", apiserver)
    wait_until("kube-apiserver /readyz", lambda: api_get("/readyz")[0] == 200, 90, "kube-apiserver")

    start("kube-controller-manager", [
        str(bin_dir / "kube-controller-manager"), f"--kubeconfig={KUBECONFIG}", "--bind-address=127.0.0.1",
        "--secure-port=0", "--leader-elect=false", f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}", "--controllers=*", "--use-service-account-credentials=false",
        "--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-gc-syncs=20", *GANG_FEATURE_GATES,
    ])
    sched_cfg = RUN / "scheduler.yaml"
    sched_cfg.write_text(f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {{kubeconfig: "{KUBECONFIG}", qps: 300, burst: 600}}
leaderElection: {{leaderElect: false}}
""")
    start("kube-scheduler", [str(bin_dir / "kube-scheduler"), f"--config={sched_cfg}", "--bind-address=127.0.0.1",
                             "--secure-port=0", *GANG_FEATURE_GATES])
    stage_dir = bin_dir.parent / "kwok-stage"
    kwok_cfg = write_kwok_config(stage_dir)
    start("kwok", [str(bin_dir / "kwok"), f"--kubeconfig={KUBECONFIG}", f"--config={kwok_cfg}",
                   "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                   "--node-ip=172.30.0.1", f"--cidr={POD_CIDR}", "--node-lease-duration-seconds=40",
                   "--server-address=127.0.0.1:0"])

    nodes = [node_manifest(pool, i) for pool in default_pools() for i in range(pool.count)]
    wait_until("nodes to be created", lambda: kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": nodes})).returncode == 0, 30)
    wait_until("the default service account", lambda: kubectl(
        "get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0, 60,
        "kube-controller-manager")
    wait_until("kwok nodes Ready", lambda: all_nodes_ready(len(nodes)), 60, "kwok")
    ensure_device_plugin(python)
    if NODES:
        subprocess.run(["bash", str(REPO / "devcluster" / "sysdeps.sh"), "node"], check=True)
        images = built_images()
        for node in NODES:
            start_real_node(bin_dir, node, adv, images["pause"])
        start_kube_proxy(bin_dir, NODES[0])
        install_coredns(images["coredns"])
    log(f"cluster up in {time.monotonic() - t0:.1f}s: {len(nodes)} kwok nodes, {len(NODES)} real node(s); "
        f"export KUBECONFIG={KUBECONFIG} PATH={BIN}:$PATH")


# --------------------------------------------------------------------------------------------
# real nodes


def start_registry(bin_dir: Path) -> None:
    """The OCI registry the nodes pull from, on a loopback port; its storage outlives the cluster.
    Blobs of manifests deleted since the last start are freed first (the registry must be down)."""
    config = RUN / "registry.yml"
    config.write_text(registry.config())
    registry.STORAGE.mkdir(parents=True, exist_ok=True)
    if port_open(registry.PORT):
        raise SystemExit(f"port {registry.PORT} is already in use by another process; stop it or set "
                         "DPJOB_REGISTRY_PORT")
    gc = registry.garbage_collect(bin_dir / "registry", config) if registry.has_repositories() else None
    if gc is not None and gc.returncode != 0:
        log(f"registry garbage-collect failed (the registry starts anyway): {gc.stderr.strip()[-300:]}")
    start("registry", registry.command(bin_dir / "registry", config))
    wait_until(f"the registry on {registry.HOST}", registry.ready, 30, "registry")


def built_images(names: tuple[str, ...] = ("pause", "coredns", "operator", "trainer")) -> dict[str, str]:
    """Build (or reuse) the images and push them to the dev registry: name -> the reference to run.

    A tag the push moved (``trainer:cpu`` after a trainer change) is forgotten on the running nodes,
    so the next pod that names it pulls the new build."""
    pushed = publish.push_images(registry.DEV_REPOSITORY, list(names), publish.source_version(), dev=True)
    forget_on_nodes(pushed)
    return {name: ref for name, (ref, _) in pushed.items()}


def forget_on_nodes(pushed: dict[str, tuple[str, dict[str, str]]]) -> None:
    """After a push to the dev registry: each running node forgets the tags that moved and the
    superseded dev builds (``publish.push_images``'s result)."""
    digests = {ref: digest for _, tags in pushed.values() for ref, digest in tags.items()}
    for node in NODES:
        if node.socket.exists():
            realnode.forget(node, digests, {registry.DEV_REPOSITORY: registry.PUBLIC_REPOSITORY},
                            [ref for ref, _ in pushed.values()])


def start_real_node(bin_dir: Path, node: realnode.RealNode, adv: str, pause_image: str) -> None:
    """containerd + kubelet for one node; its pods get CNI addresses in ``node.subnet``."""
    t0 = time.monotonic()
    realnode.wipe(node)  # whatever a killed run left: containers, mounts, the bridge
    for sub in ("containerd", "cni", "pki", "kubelet"):
        (node.state / sub).mkdir(parents=True, exist_ok=True)
    (node.state / "containerd" / "config.toml").write_text(realnode.containerd_config(node, pause_image))
    registry.write_node_hosts(node.registry_hosts)
    (node.state / "cni" / "10-dpjob.conflist").write_text(json.dumps(realnode.cni_config(node), indent=2))
    pki = RUN / "pki"
    issue_cert(pki, "kubelet", f"/CN={node.name}", "serverAuth", [f"IP:{adv}", "IP:127.0.0.1", f"DNS:{node.name}"],
               out_dir=node.state / "pki")
    issue_cert(pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{node.name}", "clientAuth",
               out_dir=node.state / "pki")
    kubeconfig = cert_kubeconfig(node.state / "kubelet.kubeconfig", node.state / "pki" / "kubelet-client.crt",
                                 node.state / "pki" / "kubelet-client.key")
    (node.state / "kubelet.yaml").write_text(realnode.kubelet_config(node, pki))

    component = f"containerd-{node.index}"
    start(component, [realnode.CONTAINERD, "--config", str(node.state / "containerd" / "config.toml")])
    wait_until(f"containerd of {node.name}", lambda: realnode.ctr(node, "version", check=False,
                                                                  timeout=5).returncode == 0, 30, component)
    labels = ",".join(f"{k}={v}" for k, v in realnode.labels(node).items())
    realnode.ensure_cgroup_root(node)
    component = f"kubelet-{node.index}"
    start(component, [str(bin_dir / "kubelet"), f"--config={node.state / 'kubelet.yaml'}",
                      f"--kubeconfig={kubeconfig}", f"--hostname-override={node.name}", f"--node-ip={adv}",
                      f"--node-labels={labels}", f"--root-dir={node.state / 'kubelet'}",
                      f"--cert-dir={node.state / 'pki'}", "--v=1"])
    wait_until(f"node {node.name} Ready", lambda: node_ready(node.name), 90, component)
    log(f"real node {node.name} Ready in {time.monotonic() - t0:.1f}s (kubelet + containerd, pods in {node.subnet})")


def start_kube_proxy(bin_dir: Path, node: realnode.RealNode) -> None:
    pki = RUN / "pki"
    kubeconfig = cert_kubeconfig(RUN / "kube-proxy.kubeconfig", pki / "kube-proxy.crt", pki / "kube-proxy.key")
    cfg = RUN / "kube-proxy.yaml"
    cfg.write_text(realnode.kube_proxy_config(node, kubeconfig))
    start("kube-proxy", [str(bin_dir / "kube-proxy"), f"--config={cfg}", "--v=1"])
    wait_until("kube-proxy /healthz", lambda: urllib.request.urlopen("http://127.0.0.1:10256/healthz",
                                                                     timeout=1).status == 200, 60, "kube-proxy")


def install_coredns(image: str) -> None:
    docs = realnode.coredns_manifests(image, {"dpjob.io/pool": realnode.POOL})
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    out = kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s", check=False)
    if out.returncode != 0:
        pods = kubectl("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "wide", check=False).stdout
        raise SystemExit(f"CoreDNS did not become ready: {out.stderr.strip()}\n{pods}")


def node_ready(name: str) -> bool:
    out = kubectl("get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return out.returncode == 0 and out.stdout == "True"


def all_nodes_ready(expected: int) -> bool:
    out = kubectl("get", "nodes", "-l", "type=kwok", "-o", "json", check=False)
    if out.returncode != 0:
        return False
    items = json.loads(out.stdout)["items"]
    ready = [n for n in items for c in n.get("status", {}).get("conditions", [])
             if c["type"] == "Ready" and c["status"] == "True"]
    return len(ready) >= expected


def ensure_device_plugin(python: str | None) -> None:
    """The simulated Ascend device plugin needs the project's venv (kubernetes client)."""
    script = REPO / "devcluster" / "ascend_device_plugin.py"
    if not python or not script.exists() or alive(read_pid("ascend-device-plugin")):
        return
    start("ascend-device-plugin", [python, str(script), "--kubeconfig", str(KUBECONFIG)],
          env={"PYTHONUNBUFFERED": "1"})


def down(quiet: bool = False) -> None:
    """Stop exactly the processes ``up`` started (by pid), then remove the state."""
    import shutil

    for component in reversed(COMPONENTS):
        pid = read_pid(component)
        if component.startswith("containerd-") and alive(pid):  # its containers first: shims outlive it
            realnode.kill_containers(NODES[int(component.split("-")[1])])
        if alive(pid):
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
            if not quiet:
                log(f"stopped {component} (pid {pid})")
    for node in NODES:
        realnode.wipe(node)
    if NODES and (BIN / "kubectl").is_symlink():  # kube-proxy's iptables chains outlive it
        subprocess.run([str((BIN / "kubectl").resolve().parent / "kube-proxy"), "--cleanup"], capture_output=True)
    if STATE.exists():
        for sub in ("run", "pids", "kubeconfig", "prometheus"):
            p = STATE / sub
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
    if not quiet:
        log("cluster down")


def restart(component: str) -> float:
    """Stop one control-plane process and start it again with the same command line (a chaos drill:
    what an upgrade or a crash looks like to clients). Returns the seconds it was unavailable."""
    pid = read_pid(component)
    if not alive(pid):
        raise SystemExit(f"{component} is not running; start the cluster with `make cluster-up`")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    t0 = time.monotonic()
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)
    start(component, argv)
    if component == "kube-apiserver":
        wait_until("kube-apiserver /readyz", lambda: api_get("/readyz")[0] == 200, 90, component)
    return time.monotonic() - t0


def status() -> int:
    for component in COMPONENTS:
        pid = read_pid(component)
        if component in ("operator", "prometheus") and not alive(pid):
            continue
        print(f"{component:26s} {'running' if alive(pid) else 'stopped'} {pid or ''}")
    ok = KUBECONFIG.exists() and cluster_is_up()
    print(f"api: {'ready' if ok else 'not ready'}  kubeconfig: {KUBECONFIG}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the cluster (idempotent)")
    p_up.add_argument("--bin-dir", required=True, type=Path, help="directory printed by devcluster/build.sh")
    p_up.add_argument("--python", help="venv python for the simulated Ascend device plugin")
    sub.add_parser("down", help="stop what `up` started and remove the state")
    sub.add_parser("status", help="show component state")
    p_restart = sub.add_parser("restart", help="stop and start one control-plane component (chaos drills)")
    p_restart.add_argument("component", choices=CONTROL_PLANE)
    args = parser.parse_args()
    if args.cmd == "up":
        up(args.bin_dir.resolve(), args.python)
        return 0
    if args.cmd == "down":
        down()
        return 0
    if args.cmd == "restart":
        log(f"{args.component} restarted, unavailable for {restart(args.component):.1f}s")
        return 0
    return status()


if __name__ == "__main__":
    sys.exit(main())
