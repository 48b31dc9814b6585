"""The operator's ``/metrics`` endpoint: Prometheus' exposition behind an optional gate and TLS.

``prometheus_client.start_http_server`` serves anyone who can reach the port. Ours asks the API
server first (``k8s/reviews.py``) when ``metricsAuth`` is ``kubernetes`` (the chart's default),
and speaks HTTPS when a certificate is configured, as controller-runtime's secure metrics serving
does. The exposition itself is prometheus_client's WSGI app; only the gate is ours.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger("dpjob.metrics")

Authorize = Callable[[str | None], Any]  # Authorization header -> a Verdict (status, reason, allowed)
StartResponse = Callable[..., Any]


HANDSHAKE_TIMEOUT_SECONDS = 10.0


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the process at exit

    def finish_request(self, request: Any, client_address: Any) -> None:
        """The TLS handshake happens here, in the connection's own thread: done in ``accept()``
        (``do_handshake_on_connect``), one client that never finishes it would stall every scrape."""
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError):
                return
            request.settimeout(None)
        super().finish_request(request, client_address)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: Prometheus scrapes every few seconds."""


def gated(app: Callable[..., Iterable[bytes]], authorize: Authorize) -> Callable[..., Iterable[bytes]]:
    """``app`` behind ``authorize``: 401, 403 or 503 with a one-line reason, else ``app``'s answer."""
    def gate(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        verdict = authorize(environ.get("HTTP_AUTHORIZATION"))
        if verdict.allowed:
            return app(environ, start_response)
        headers = [("Content-Type", "text/plain; charset=utf-8")]
        if verdict.status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="dpjob-operator"'))
        phrase = {401: "Unauthorized", 403: "Forbidden"}.get(verdict.status, "Service Unavailable")
        start_response(f"{verdict.status} {phrase}", headers)
        return [f"{verdict.reason}\n".encode()]
    return gate


def serve_metrics(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0",
                  authorize: Authorize | None = None, certfile: str = "", keyfile: str = "") -> WSGIServer:
    """Serve ``registry`` on ``addr:port`` in a daemon thread and return the server (``shutdown()``
    stops it). The socket is wrapped in TLS before the first request can arrive."""
    app = make_wsgi_app(registry)
    if authorize is not None:
        app = gated(app, authorize)
    server_class: type[_Server] = _Server
    if ":" in addr:
        server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    httpd = make_server(addr, port, app, server_class, handler_class=_QuietHandler)
    if certfile and keyfile:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile, keyfile)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    scheme = "https" if certfile and keyfile else "http"
    log.info("serving /metrics on %s://%s:%d (%s)", scheme, addr, httpd.server_port,
             "API-server authorization" if authorize else "no authorization")
    return httpd
