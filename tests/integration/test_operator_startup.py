"""An operator started while the API server is unreachable leads seconds after it answers, in the
same process.

Its Deployment starts the operator's pod again whenever it exits, and a leader that cannot renew its
Lease through an API-server outage exits by design: the new process often starts while the API
server is still down. kopf runs a failed startup again; a try that left its metrics server bound or
its collectors registered would make every later try fail ("Address already in use"), and the pod
would sit there, alive and doing nothing, until a liveness restart. The outage here is a TCP relay
to the real API server that refuses connections until the test opens it.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.support.operator import OperatorProcess, metric_sum
from tests.support.paths import DEVCLUSTER
from tests.support.relay import Relay
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]

# handlers.STARTUP_RETRY_SECONDS (2 s), a sync of the watches and a Lease taken; kopf's default
# retry would be a minute.
LEADS_WITHIN = 20


def _through(kubeconfig: Path, relay: Relay, tmp_path: Path) -> Path:
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"  # in the serving cert
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_operator_started_while_the_api_server_is_unreachable_leads_seconds_after_it_answers(
        cluster, crds, namespace, tmp_path):
    server = urlsplit(yaml.safe_load(cluster.read_text())["clusters"][0]["cluster"]["server"])
    assert server.hostname and server.port
    logs = DEVCLUSTER / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with Relay(server.hostname, server.port) as relay:
        operator = OperatorProcess(_through(cluster, relay, tmp_path), logs / f"operator-{namespace}.log",
                                   {"DPJOB_NAMESPACES": namespace}, lease=(namespace, "dpjob-operator-leader"))
        try:
            operator.start(wait=False)
            wait_until(lambda: "will try again in" in operator.log_text(), timeout=60, interval=0.2,
                       what="the operator's first startup to fail on the unreachable API server")
            assert relay.refused, "the operator never tried the API server"
            assert operator.proc is not None
            pid = operator.proc.pid
            relay.open()
            opened = time.monotonic()
            operator.wait_leading(timeout=LEADS_WITHIN + 40)
            took = time.monotonic() - opened
            assert took <= LEADS_WITHIN, f"led {took:.1f}s after the API server answered"
            assert operator.proc.pid == pid and operator.proc.poll() is None, "it led only after a restart"
            log = operator.log_text()
            assert "Address already in use" not in log, log[-2000:]
            # The metrics server of the first try still serves, and says this process leads.
            assert metric_sum(operator.metrics(), "leader_election_master_status") == 1
            print(f"led {took:.1f}s after the API server answered")
        finally:
            operator.stop()
