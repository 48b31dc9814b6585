"""The control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, with
exactly the flags that matter for the operator (RBAC, token auth, service-account signing, high
client QPS), and the API server's readiness as seen over HTTPS. Standard library only.
"""

from __future__ import annotations

import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from devcluster import manifests
from devcluster.processes import alive, port_open, read_pid, start, stop, wait_for
from devcluster.state import (
    APISERVER_PORT,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    GANG_FEATURE_GATES,
    GANG_SCHEDULING,
    KUBECONFIG,
    LOGS,
    NODES,
    RUN,
    SERVICE_CIDR,
)


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
    policy.write_text(manifests.text("audit-policy.yaml"))
    return [f"--audit-policy-file={policy}", f"--audit-log-path={LOGS / 'audit.log'}", "--audit-log-maxsize=500"]


def api_get(path: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(RUN / "pki" / "ca.crt"))
    req = urllib.request.Request(f"https://127.0.0.1:{APISERVER_PORT}{path}",
                                 headers={"Authorization": f"Bearer {(RUN / 'admin.token').read_text().strip()}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=3) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def start_etcd(bin_dir: Path) -> None:
    etcd_url = f"http://127.0.0.1:{ETCD_CLIENT_PORT}"
    start("etcd", [str(bin_dir / "etcd"), f"--data-dir={RUN / 'etcd'}", "--name=default",
                   f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                   f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                   f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                   f"--initial-cluster=default=http://127.0.0.1:{ETCD_PEER_PORT}",
                   "--unsafe-no-fsync", "--quota-backend-bytes=4294967296", "--log-level=warn"])
    wait_for("etcd", lambda: port_open(ETCD_CLIENT_PORT), 30, "etcd")


def apiserver_command(bin_dir: Path, adv: str) -> list[str]:
    pki = RUN / "pki"
    apiserver = [
        # Real nodes' pods reach the API server through the kubernetes Service (advertise address).
        str(bin_dir / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
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
    return apiserver + audit_flags()


def start_apiserver(bin_dir: Path, adv: str) -> None:
    start("kube-apiserver", apiserver_command(bin_dir, adv))
    wait_for("kube-apiserver /readyz", lambda: api_get("/readyz")[0] == 200, 90, "kube-apiserver")


def start_controllers(bin_dir: Path) -> None:
    """kube-controller-manager and kube-scheduler (leader election off: one of each)."""
    pki = RUN / "pki"
    start("kube-controller-manager", [
        str(bin_dir / "kube-controller-manager"), f"--kubeconfig={KUBECONFIG}", "--bind-address=127.0.0.1",
        "--secure-port=0", "--leader-elect=false", f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}", "--controllers=*", "--use-service-account-credentials=false",
        "--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-gc-syncs=20", *GANG_FEATURE_GATES,
    ])
    sched_cfg = RUN / "scheduler.yaml"
    sched_cfg.write_text(manifests.render("kube-scheduler.yaml", kubeconfig=KUBECONFIG))
    start("kube-scheduler", [str(bin_dir / "kube-scheduler"), f"--config={sched_cfg}", "--bind-address=127.0.0.1",
                             "--secure-port=0", *GANG_FEATURE_GATES])


def restart(component: str) -> float:
    """Stop one control-plane process and start it again with the same command line (a chaos drill:
    what an upgrade or a crash looks like to clients). Returns the seconds it was unavailable."""
    pid = read_pid(component)
    if not alive(pid):
        raise SystemExit(f"{component} is not running; start the cluster with `make cluster-up`")
    assert pid is not None
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    t0 = time.monotonic()
    stop(pid, timeout=30, poll=0.05)
    start(component, argv)
    if component == "kube-apiserver":
        wait_for("kube-apiserver /readyz", lambda: api_get("/readyz")[0] == 200, 90, component)
    return time.monotonic() - t0
