"""What the chart makes for /metrics: gated by the API server by default, a reader identity for
its own ServiceMonitor, HTTPS from a TLS Secret, and an explicit way to open it."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.helm import by_kind, helm_binary, render

pytestmark = [pytest.mark.unit, pytest.mark.skipif(
    helm_binary() is None and not os.environ.get("CI"),
    reason="no helm binary (devcluster/build.sh builds one); under CI=true the tests fail instead")]

READER = "dpjob-dpjob-operator-metrics-reader"


def _config(objs: list[dict]) -> dict:
    (cm,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].endswith("-config")]
    return json.loads(cm["data"]["config.json"])


def _named(objs: list[dict], kind: str, name: str) -> list[dict]:
    return [o for o in by_kind(objs, kind) if o["metadata"]["name"] == name]


def test_by_default_the_api_server_decides_who_reads_metrics():
    objs = render(set_=["serviceMonitor.enabled=true"])
    assert _config(objs)["metricsAuth"] == "kubernetes"
    (delegator,) = _named(objs, "ClusterRoleBinding", "dpjob-dpjob-operator-auth-delegator")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"] == [{"kind": "ServiceAccount", "name": "dpjob-dpjob-operator",
                                      "namespace": "dpjob-system"}]
    (role,) = _named(objs, "ClusterRole", READER)
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    (secret,) = _named(objs, "Secret", f"{READER}-token")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == READER
    (binding,) = _named(objs, "ClusterRoleBinding", READER)
    assert binding["subjects"][0]["name"] == READER and binding["roleRef"]["name"] == READER
    (sm,) = by_kind(objs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["authorization"] == {
        "type": "Bearer", "credentials": {"name": f"{READER}-token", "key": "token"}}


def test_auth_none_opens_metrics_and_grants_nothing():
    objs = render(set_=["serviceMonitor.enabled=true", "metrics.auth=none"])
    assert _config(objs)["metricsAuth"] == "none"
    assert not _named(objs, "ClusterRoleBinding", "dpjob-dpjob-operator-auth-delegator")
    assert not _named(objs, "Secret", f"{READER}-token")
    (sm,) = by_kind(objs, "ServiceMonitor")
    assert "authorization" not in sm["spec"]["endpoints"][0]


def test_a_tls_secret_makes_metrics_https_and_the_monitor_verifies_it():
    objs = render(set_=["serviceMonitor.enabled=true", "metrics.tls.secretName=operator-metrics-tls"])
    cfg = _config(objs)
    assert (cfg["metricsCertFile"], cfg["metricsKeyFile"]) == ("/etc/dpjob/metrics-tls/tls.crt",
                                                               "/etc/dpjob/metrics-tls/tls.key")
    (deploy,) = by_kind(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert {"name": "metrics-tls", "secret": {"secretName": "operator-metrics-tls"}} in pod["volumes"]
    assert any(m["name"] == "metrics-tls" for m in pod["containers"][0]["volumeMounts"])
    (sm,) = by_kind(objs, "ServiceMonitor")
    ep = sm["spec"]["endpoints"][0]
    assert ep["scheme"] == "https"
    assert ep["tlsConfig"] == {"serverName": "dpjob-dpjob-operator-metrics.dpjob-system.svc",
                               "ca": {"secret": {"name": "operator-metrics-tls", "key": "ca.crt"}}}
    assert _config(render())["metricsCertFile"] == ""
