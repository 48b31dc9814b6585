"""The dev cluster's certificates and kubeconfigs: a CA, the API server's serving certificate, the
service-account key pair, client certificates (the API server's for kubelets, kube-proxy's, each
kubelet's) and the admin token. Created once per cluster under ``run/pki``. Standard library only.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from devcluster import manifests
from devcluster.state import APISERVER_PORT, KUBECONFIG, RUN


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
    path.write_text(manifests.render("cert-kubeconfig.yaml", apiserver_port=APISERVER_PORT,
                                     ca=RUN / "pki" / "ca.crt", cert=cert, key=key))
    path.chmod(0o600)
    return path


def write_kubeconfig() -> None:
    """The admin kubeconfig (``.devcluster/kubeconfig``): the admin token, namespace default."""
    KUBECONFIG.write_text(manifests.render("kubeconfig.yaml", apiserver_port=APISERVER_PORT, ca=RUN / "pki" / "ca.crt",
                                           token=(RUN / "admin.token").read_text().strip()))
    KUBECONFIG.chmod(0o600)
