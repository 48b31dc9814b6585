"""What runs on top of the cluster so a job really trains and is seen: the operator installed with
Helm as a pod from the image built here, and a Prometheus 3 that discovers the trainer and
operator pods through the API server (as the chart's PodMonitor and ServiceMonitor would).

Used by ``make dev`` (devcluster/dev.py), the tests and the benchmarks, as one name for what they
need from the cluster. This module owns the CRDs and the source path; each other part lives in the
module for its concern and is re-exported here: ``operator_release`` (the Helm release of the
operator, scaling it), ``dev_prometheus`` (the Prometheus process), ``workloads`` (images built
here, a job's pods placed on the real nodes).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import cluster  # noqa: E402
from devcluster.dev_prometheus import Proc, cluster_prometheus, existing, promql  # noqa: E402
from devcluster.kube import kubectl  # noqa: E402
from devcluster.operator_release import (  # noqa: E402
    METRICS_READER_SECRET,
    METRICS_TOKEN,
    OPERATOR_DEPLOYMENT,
    OPERATOR_NAMESPACE,
    RELEASE,
    give_back_operator,
    install_operator,
    operator_installed,
    operator_pod,
    operator_replicas,
    operator_values,
    scale_operator,
    write_metrics_token,
)
from devcluster.workloads import (  # noqa: E402
    SHARED_DIR,
    node_images,
    run_on_real_node,
    trainer_image,
    trainer_mindspore_image,
    with_trainer_image,
)

# What make dev, the tests and the benchmarks read from here (``stack.cluster.NODES`` included).
__all__ = ["METRICS_READER_SECRET", "METRICS_TOKEN", "OPERATOR_DEPLOYMENT", "OPERATOR_NAMESPACE", "RELEASE",
           "SHARED_DIR", "Proc", "apply_crds", "cluster", "cluster_prometheus", "existing", "give_back_operator",
           "install_operator", "node_images", "operator_installed", "operator_pod", "operator_replicas",
           "operator_values", "promql", "run_on_real_node", "scale_operator", "source_pythonpath",
           "trainer_image", "trainer_mindspore_image", "with_trainer_image", "write_metrics_token"]


def apply_crds(timeout: float = 60) -> None:
    """Apply crds/ and wait until the API server serves every CRD (condition Established).

    Not ``kubectl wait --for=condition=Established``: on a CRD created a moment ago it can read the
    object before the API server has written any condition and fail at once ("accessor error:
    <nil> is of the type <nil>"), which broke ``make dev`` on a fresh machine."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    names = kubectl("get", "-f", str(REPO / "crds"), "-o", "name").stdout.split()
    query = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + timeout
    for name in names:
        while kubectl("get", name, "-o", query, check=False).stdout.strip() != "True":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} is not Established after {timeout:.0f}s; "
                                   f"see kubectl describe {name} (is the API server healthy?)")
            time.sleep(0.2)


def source_pythonpath() -> str:
    """This checkout's packages first, so a process never runs another checkout's editable install
    (the cached venv is shared by every clone on the machine)."""
    own = [str(REPO / "operator"), str(REPO / "trainer-image"), str(REPO)]
    return os.pathsep.join(own + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
