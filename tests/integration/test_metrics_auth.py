"""The operator's /metrics answers only whom the API server allows, with the chart's RBAC.

The chart binds the operator's ServiceAccount to system:auth-delegator and makes a reader
ServiceAccount with a token Secret (what its ServiceMonitor presents). Here the operator's own
gate runs with the chart's operator identity against the real API server: the chart's reader
gets the metrics; no token, a forged token or a ServiceAccount without the reader role do not.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import pytest
from kubernetes import client, config
from prometheus_client import CollectorRegistry, Gauge

from dpjob_operator.k8s.reviews import DelegatedAuthorizer
from dpjob_operator.metrics_server import serve_metrics
from tests.support import cluster as dpj
from tests.support.helm import Installed, fullname, service_account_kubeconfig
from tests.support.ports import free_port
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def _scrape(port: int, token: str | None) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _secret_token(namespace: str, name: str) -> str | None:
    out = dpj.kubectl("-n", namespace, "get", "secret", name, "-o", "jsonpath={.data.token}", check=False)
    return base64.b64decode(out.stdout).decode() if out.returncode == 0 and out.stdout else None


def test_metrics_answer_the_charts_reader_and_refuse_everyone_else(cluster, crds, namespace, tmp_path):
    with Installed(cluster, namespace) as inst:
        name = fullname(inst.release)
        operator_kubeconfig = service_account_kubeconfig(namespace, name, tmp_path / "operator.kubeconfig")
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(operator_kubeconfig), client_configuration=cfg)
        registry = CollectorRegistry()
        Gauge("dpjob_jobs", "jobs known", registry=registry).set(3)
        port = free_port()
        server = serve_metrics(registry, port, "127.0.0.1", DelegatedAuthorizer(client.ApiClient(cfg)).verdict)
        try:
            reader = wait_until(lambda: _secret_token(namespace, f"{name}-metrics-reader-token"), timeout=30,
                                what="the token controller to fill the reader's Secret")
            dpj.kubectl("-n", namespace, "create", "serviceaccount", "stranger")
            stranger = dpj.kubectl("-n", namespace, "create", "token", "stranger").stdout.strip()

            status, body = _scrape(port, reader)
            assert status == 200 and "dpjob_jobs 3.0" in body, (status, body)
            assert _scrape(port, None) == (401, "a bearer token is required (a ServiceAccount token allowed "
                                                "to get /metrics)\n")
            assert _scrape(port, "forged.token.value") == (401, "the token is not valid\n")
            status, body = _scrape(port, stranger)
            assert status == 403 and f"system:serviceaccount:{namespace}:stranger may not get /metrics" in body
            assert "dpjob_jobs" not in body
        finally:
            server.shutdown()
            server.server_close()
