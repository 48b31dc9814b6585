"""Whether ``restartStrategy: Auto`` may pick InPlace (reconcile/inplace.py): the operator's config
allows it and the API server serves it (k8s/inplace_probe.py). Found out once, at start."""

from __future__ import annotations

import logging

from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.inplace_probe import serves_restart_in_place

log = logging.getLogger("dpjob.controller")


async def detect_restart_in_place(cfg: OperatorConfig, kube: KubeClient, blocking: Blocking) -> bool:
    if cfg.restart_in_place == "disabled":
        served, why = False, "disabled by the operator's config (restartInPlace)"
    else:
        namespace = cfg.namespaces[0] if cfg.namespaces else cfg.leader_election.namespace
        served, why = await blocking.run(serves_restart_in_place, kube, namespace)
    log.info("restart in place: %s (%s)", "on" if served else "off", why)
    return served
