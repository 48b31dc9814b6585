"""Container logs: the files ``<state-dir>/logs/<namespace>_<pod>_<container>.log``, read by the
``logs`` subcommand, and served like the kubelet's ``/containerLogs/<ns>/<pod>/<container>`` over HTTPS
(self-signed; the kube-apiserver does not verify kubelet certificates unless started with
``--kubelet-certificate-authority``) so that ``kubectl logs`` works through the apiserver's node proxy.
"""

from __future__ import annotations

import logging
import ssl
import subprocess
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import parse_qs, unquote, urlparse

log = logging.getLogger("nodeagent.logs")


def log_file(logs_dir: Path, namespace: str, pod: str, container: Optional[str]) -> Path:
    """The log file of a container; without a container name, the pod's only container."""
    logs_dir = Path(logs_dir)
    if container:
        return logs_dir / f"{namespace}_{pod}_{container}.log"
    prefix = f"{namespace}_{pod}_"
    found = sorted(p for p in logs_dir.glob(f"{prefix}*.log")
                   if "." not in p.name[len(prefix):-len(".log")] and "_" not in p.name[len(prefix):-len(".log")])
    if len(found) == 1:
        return found[0]
    if not found:
        raise FileNotFoundError(f"no logs for pod {namespace}/{pod} in {logs_dir}")
    names = ", ".join(p.name[len(prefix):-len(".log")] for p in found)
    raise FileNotFoundError(f"pod {namespace}/{pod} has several containers; choose one of: {names}")


def is_running(path: Path) -> bool:
    return Path(str(path) + ".running").exists()


def stream_log(path: Path, write: Callable[[bytes], None], follow: bool = False, tail_lines: Optional[int] = None,
               limit_bytes: Optional[int] = None, stop: Optional[threading.Event] = None) -> None:
    """Write the log (its last ``tail_lines`` lines) and, with ``follow``, what is appended until the
    container stops running."""
    sent = 0

    def emit(data: bytes) -> bool:
        nonlocal sent
        if limit_bytes is not None:
            data = data[:max(0, limit_bytes - sent)]
        if data:
            write(data)
            sent += len(data)
        return limit_bytes is None or sent < limit_bytes

    with open(path, "rb") as f:
        if tail_lines is not None:
            lines = deque(f, maxlen=max(0, tail_lines))
            if not emit(b"".join(lines)):
                return
        else:
            while chunk := f.read(65536):
                if not emit(chunk):
                    return
        if not follow:
            return
        idle_after_exit = 0
        while not (stop and stop.is_set()):
            chunk = f.read(65536)
            if chunk:
                idle_after_exit = 0
                if not emit(chunk):
                    return
                continue
            if not is_running(path):
                idle_after_exit += 1
                if idle_after_exit > 2:
                    return
            time.sleep(0.2)


def make_cert(pki: Path, ip: str) -> tuple[Path, Path]:
    pki.mkdir(parents=True, exist_ok=True)
    crt, key = pki / f"kubelet-{ip}.crt", pki / f"kubelet-{ip}.key"
    if not crt.exists() or not key.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                        "-subj", f"/CN=dpjob-nodeagent-{ip}", "-addext", f"subjectAltName=IP:{ip}",
                        "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt, key


class _Handler(BaseHTTPRequestHandler):
    server_version = "dpjob-nodeagent"
    logs_dir: Path = Path(".")

    def log_message(self, fmt, *args):  # quiet: one line per request at debug level
        log.debug("log server: " + fmt, *args)

    def _error(self, code: int, msg: str) -> None:
        body = msg.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - http.server API
        url = urlparse(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            return self._error(200, "ok")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._error(404, f"the dpjob node agent serves only /containerLogs/<ns>/<pod>/<container>, "
                                    f"not {url.path}")
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        _, ns, pod, container = parts
        if q.get("previous") in ("true", "1"):
            return self._error(400, "previous terminated container logs are not kept separately by the dpjob node "
                                    "agent (restarts append to the same log)")
        try:
            path = log_file(self.logs_dir, ns, pod, container)
            if not path.exists():
                raise FileNotFoundError(f'container "{container}" in pod "{pod}" has no logs (not started yet?)')
        except FileNotFoundError as exc:
            return self._error(404, str(exc))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Connection", "close")
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(data)
            self.wfile.flush()

        try:
            stream_log(path, write, follow=q.get("follow") in ("true", "1"),
                       tail_lines=int(q["tailLines"]) if q.get("tailLines") else None,
                       limit_bytes=int(q["limitBytes"]) if q.get("limitBytes") else None)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass


class LogServer:
    def __init__(self, logs_dir: Path, host: str, port: int, pki: Path):
        crt, key = make_cert(pki, host)
        handler = type("Handler", (_Handler,), {"logs_dir": Path(logs_dir)})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="log-server", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
