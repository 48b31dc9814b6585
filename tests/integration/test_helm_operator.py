"""The operator, run with the Helm chart's ServiceAccount token, reconciles a job end to end:
the chart's RBAC is enough for everything the operator really does (not only what can-i says)."""

from __future__ import annotations

import re

import pytest

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.helm import Installed, fullname, service_account_kubeconfig
from tests.support.operator import OperatorProcess
from tests.support.paths import DEVCLUSTER

pytestmark = pytest.mark.integration


def test_operator_with_the_chart_service_account_runs_a_job(cluster, namespace, tmp_path, operator, api):
    with Installed(cluster, namespace) as inst:
        kubeconfig = service_account_kubeconfig(namespace, fullname(inst.release), tmp_path / "sa.kubeconfig")
        operator.stop()  # exactly one operator may own the job
        # Leader election on the release's own Lease, in the release namespace: the chart's Role.
        sa_operator = OperatorProcess(kubeconfig, DEVCLUSTER / "logs" / "operator-sa.log",
                                      lease=(namespace, f"{fullname(inst.release)}-leader"))
        try:
            sa_operator.start()
            dpj.create(api, namespace, JobBuilder().replicas(2).completes_after("2s").obj())
            st = dpj.wait_phase(api, namespace, "train", "Succeeded", timeout=60)
            assert st["succeededReplicas"] == 2
            for reason in ("Accepted", "JobSucceeded"):
                dpj.wait_event(namespace, "train", reason)
            # An RBAC denial names the identity ('forbidden: User "system:serviceaccount:..." cannot ...');
            # other 403s (a namespace left terminating by an earlier test) are not about the chart.
            denials = re.findall(r'forbidden: User "system:serviceaccount:[^"]+" cannot [^;)]*',
                                 sa_operator.log_path.read_text(errors="replace"))
            assert not denials, f"the chart's RBAC refused: {sorted(set(denials))}"
        finally:
            sa_operator.stop()
            operator.start()
