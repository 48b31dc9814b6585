"""The operator's client keeps its connections to the real API server.

urllib3 gives a connection back to its pool only once the response is read to the end; the
operator skips the client's model decoding (``_preload_content=False``) and, for creates and
deletes, had no use for the body. Every such call then opened a new TLS connection: under 200
jobs about 45 handshakes a second, 8% of the API server's CPU in RSA signatures, and a round trip
more on every call of a pass.
"""

from __future__ import annotations

import logging
import re

import pytest

from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.connection import tuned

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)


def _connections(caplog: pytest.LogCaptureFixture) -> int:
    """Connections opened so far, as urllib3 logs each one (at debug level)."""
    return sum(1 for r in caplog.records if re.match(r"Starting new HTTPS? connection", r.getMessage()))


def test_creates_conflicts_and_events_reuse_one_connection(namespace, caplog):
    from kubernetes import client, config

    from tests.support.paths import KUBECONFIG

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(KUBECONFIG), client_configuration=cfg)
    caplog.set_level(logging.DEBUG, logger="urllib3.connectionpool")
    api = client.ApiClient(tuned(cfg, 4))
    kube = KubeClient(api, qps=0, burst=0)
    job = {"metadata": {"name": "conn", "namespace": namespace, "uid": "0f0f0f0f-0000-4000-8000-000000000002"}}
    for i in range(10):  # one after another: one connection is enough for all of them
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": namespace}}
        assert kube.create_if_absent(cm)
        assert not kube.create_if_absent(cm)  # 409: the error path reads its body too
        kube.post_event(job, "Normal", "Reuse", f"call {i}")
    assert _connections(caplog) == 1, f"{_connections(caplog)} connections for 30 sequential calls"
