"""kopf wiring, kept thin: settings, startup/cleanup, probes, and the process's lifecycle.

kopf runs the operator (login, signals, the liveness endpoint and its probes, startup and cleanup)
and handles no resource: every kind the controller reads (jobs, rank pods, PodGroups, Kueue
Workloads, Nodes) comes through one list+watch path of its own (``k8s/reflector.py``), so each fact
is learnt one way, with the same relist, resync and liveness rules (docs/architecture.md says why).

With leader election on, every replica watches and caches (jobs, pods), but only the leader's
controller has workers. A replica that loses the Lease fences and exits non-zero, as
kube-controller-manager does; a graceful stop (SIGTERM) stops the workers, then releases the Lease.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

import kopf

from dpjob_operator import metrics
from dpjob_operator.config import OperatorConfig, load_config
from dpjob_operator.controller import Controller
from dpjob_operator.controller.leader import LeaderElector
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.connection import load_api_client
from dpjob_operator.k8s.leases import LeaseClient
from dpjob_operator.k8s.reviews import DelegatedAuthorizer
from dpjob_operator.metrics_server import serve_metrics

log = logging.getLogger("dpjob")


@dataclass
class Runtime:
    """What the kopf handlers share in one operator process: set by ``__main__`` (config, stop
    flag) and by ``startup`` (controller, elector); ``exit_code`` is what the process ends with."""

    config: OperatorConfig | None = None
    stop_flag: asyncio.Event | None = None
    controller: Controller | None = None
    elector: LeaderElector | None = None
    exit_code: int = 0
    metrics_server: WSGIServer | None = None  # started once per process: a retried startup must not bind again


runtime = Runtime()
# After losing the Lease, kopf's graceful stop gets this long before the process ends anyway.
EXIT_GRACE_SECONDS = 20.0
# A startup that fails (the API server unreachable while the watches sync) is tried again after this
# long, not kopf's default minute: an operator restarted during an outage leads seconds after it ends.
STARTUP_RETRY_SECONDS = 2.0


def configure(settings: kopf.OperatorSettings) -> None:
    # No persistence, watching or posting settings: kopf handles no resource, so it stores no progress
    # or diff base, adds no finalizer, watches nothing and posts no event of its own.
    settings.networking.request_timeout = 30
    settings.scanning.disabled = True  # no resource handler: no cluster-wide CRD or namespace lists


@kopf.on.startup(backoff=STARTUP_RETRY_SECONDS)
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Runs again after a failure, in the same process: whatever a failed try made is undone (the
    controller's watches, threads and job collectors) or kept (the metrics server, started once)."""
    cfg = runtime.config = runtime.config or load_config()
    configure(settings)
    if cfg.metrics_port and runtime.metrics_server is None:
        authorize = DelegatedAuthorizer(load_api_client(4)).verdict if cfg.metrics_auth == "kubernetes" else None
        runtime.metrics_server = serve_metrics(metrics.REGISTRY, cfg.metrics_port, cfg.metrics_bind_address,
                                               authorize, cfg.metrics_cert_file, cfg.metrics_key_file)
    api = load_api_client(cfg.create_concurrency + cfg.workers + 4)
    controller = Controller(cfg, KubeClient(api, cfg.api_qps, cfg.api_burst), asyncio.get_running_loop())
    try:
        await controller.start()
    except BaseException:
        await controller.stop(drain_seconds=0)  # nothing was written: nothing to wait for
        api.close()  # the next try makes a client of its own
        raise
    runtime.controller = controller
    election = cfg.leader_election
    if not election.enabled:
        controller.start_workers()
        return
    leases = LeaseClient(load_api_client(4), election.namespace, election.lease_name)
    elector = LeaderElector(leases, election.identity, election.timings,
                            on_started_leading=controller.start_workers, on_stopped_leading=_stopped_leading)
    runtime.elector = elector
    elector.start()  # in the background: kopf serves /healthz only after startup returns


def _stopped_leading(reason: str) -> None:
    """client-go's OnStoppedLeading in kube-controller-manager: stop writing at once, then exit
    non-zero, so Kubernetes restarts the pod clean and it campaigns again as a standby."""
    if runtime.controller is not None:
        runtime.controller.fence()
    log.error("leader election: stopped leading (%s); workers stopped; exiting so that the pod restarts clean",
              reason)
    runtime.exit_code = 1
    if runtime.stop_flag is not None:
        runtime.stop_flag.set()
    timer = threading.Timer(EXIT_GRACE_SECONDS, os._exit, (1,))  # if kopf's stop hangs, end it anyway
    timer.daemon = True
    timer.start()


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    """Workers first, the Lease after: the next leader must not overlap with our last writes."""
    controller, runtime.controller = runtime.controller, None
    if controller is not None:
        await controller.stop()
    elector, runtime.elector = runtime.elector, None
    if elector is not None:
        await elector.stop(release_lease=True)


@kopf.on.probe(id="progress")
def probe_progress(**_: Any) -> str:
    """Liveness that means something: /healthz answers 500 when the pod watch or a worker is wedged."""
    controller = runtime.controller
    why = controller.stuck() if controller else None
    if why:
        raise kopf.PermanentError(why)
    return "ok"


@kopf.on.probe(id="jobs")
def probe_jobs(**_: Any) -> int:
    controller = runtime.controller
    return len(controller.jobs) if controller else 0


@kopf.on.probe(id="role")
async def probe_role(**_: Any) -> str:
    """``leader`` or ``standby``; either way the replica is alive (liveness stays green)."""
    if runtime.elector is not None:
        return runtime.elector.role
    controller = runtime.controller
    return "leader" if controller is not None and controller.working else "standby"

