"""/metrics behind a gate: the bearer-token parsing and the HTTP answers a scraper sees.

The API server's side (TokenReview, SubjectAccessReview with real tokens) is in
tests/integration/test_metrics_auth.py; here the decision is given, and we check what reaches
the scraper and that nothing of the registry leaks past a refusal.
"""

from __future__ import annotations

from typing import Any

import pytest

from dpjob_operator.__main__ import _health_url, main
from dpjob_operator.config import load_config
from dpjob_operator.k8s.reviews import Verdict, bearer_token
from dpjob_operator.metrics_server import gated

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("header", "token"), [
    (None, None),
    ("", None),
    ("Bearer abc.def", "abc.def"),
    ("bearer   abc", "abc"),
    ("Basic dXNlcjpwYXNz", None),
    ("Bearer", None),
    ("Bearer ", None),
])
def test_only_a_bearer_scheme_yields_a_token(header, token):
    assert bearer_token(header) == token


def _call(verdict: Verdict, header: str | None = "Bearer t") -> tuple[str, dict[str, str], bytes]:
    seen: dict[str, Any] = {}

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"dpjob_jobs 3\n"]

    def start_response(status, headers):
        seen["status"], seen["headers"] = status, dict(headers)

    environ = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    body = b"".join(gated(app, lambda h: verdict)(environ, start_response))
    return seen["status"], seen["headers"], body


@pytest.mark.parametrize(("verdict", "status", "challenge"), [
    (Verdict(401, "a bearer token is required"), "401 Unauthorized", True),
    (Verdict(403, "system:serviceaccount:x:y may not get /metrics"), "403 Forbidden", False),
    (Verdict(503, "the API server did not answer"), "503 Service Unavailable", False),
])
def test_a_refused_scrape_gets_the_reason_and_no_metrics(verdict, status, challenge):
    got, headers, body = _call(verdict)
    assert got == status
    assert ("WWW-Authenticate" in headers) is challenge
    assert body.decode().strip() == verdict.reason
    assert b"dpjob_jobs" not in body


def test_an_allowed_scrape_gets_the_registry():
    status, _, body = _call(Verdict(200, "ok", "system:serviceaccount:monitoring:prometheus"))
    assert status == "200 OK" and body == b"dpjob_jobs 3\n"


@pytest.mark.parametrize(("addr", "url"), [
    ("0.0.0.0", "http://0.0.0.0:8081/healthz"),
    ("127.0.0.1", "http://127.0.0.1:8081/healthz"),
    ("::", "http://[::]:8081/healthz"),
])
def test_the_health_endpoint_binds_the_configured_address(addr, url):
    assert _health_url(addr, 8081) == url


def test_metrics_are_gated_by_default_and_an_operator_on_a_workstation_can_open_them(tmp_path):
    assert load_config(environ={}, serviceaccount_namespace=tmp_path / "ns").metrics_auth == "kubernetes"
    cfg = load_config(environ={"DPJOB_METRICS_AUTH": "none", "DPJOB_METRICS_BIND_ADDRESS": "127.0.0.1"},
                      serviceaccount_namespace=tmp_path / "ns")
    assert (cfg.metrics_auth, cfg.metrics_bind_address) == ("none", "127.0.0.1")


@pytest.mark.parametrize(("env", "words"), [
    ({"DPJOB_METRICS_AUTH": "token"}, "metricsAuth must be one of kubernetes, none, got 'token'"),
    ({"DPJOB_METRICS_CERT_FILE": "/tls/tls.crt"}, "metricsCertFile and metricsKeyFile go together"),
])
def test_a_bad_metrics_setting_stops_the_operator_with_one_line(monkeypatch, capsys, env, words):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DPJOB_CONFIG", raising=False)
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and err.startswith("dpjob-operator: error: configuration:")


def test_with_a_certificate_metrics_are_served_over_tls_only(tmp_path):
    import ssl
    import subprocess
    import urllib.request

    from prometheus_client import CollectorRegistry, Gauge

    from dpjob_operator.metrics_server import serve_metrics
    from tests.support.ports import free_port

    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=dpjob",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    registry = CollectorRegistry()
    Gauge("dpjob_jobs", "jobs known", registry=registry).set(2)
    port = free_port()
    server = serve_metrics(registry, port, "127.0.0.1", None, str(crt), str(key))
    import socket
    silent = socket.create_connection(("127.0.0.1", port))  # connects, never says hello
    try:
        trusted = ssl.create_default_context(cafile=str(crt))
        # ...and does not hold up a real scraper: the handshake runs per connection, not in accept()
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=trusted, timeout=5) as r:
            assert "dpjob_jobs 2.0" in r.read().decode()
        with pytest.raises(OSError):  # a plain-HTTP scraper gets no metrics
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        silent.close()
        server.shutdown()
        server.server_close()
