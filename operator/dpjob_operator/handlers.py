"""kopf wiring, kept thin: settings, startup/cleanup, and one event handler that enqueues.

No change-detecting handlers (on.create/update) on the job and none at all on Pods: those
write diff-base and progress annotations and cost PATCHes; ``on.event`` writes nothing, and
the controller's level-triggered reconcile does the rest.

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

import kopf

from dpjob_operator import metrics
from dpjob_operator.api import constants as c
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


runtime = Runtime()
# After losing the Lease, kopf's graceful stop gets this long before the process ends anyway.
EXIT_GRACE_SECONDS = 20.0


def configure(settings: kopf.OperatorSettings, cfg: OperatorConfig) -> None:
    # No persistence settings: with one on.event handler kopf stores no progress or diff base and
    # adds no finalizer (those serve change-detecting and deletion handlers, which this operator has not).
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    settings.scanning.disabled = True  # we know our CRD; no need for cluster-wide CRD/namespace lists


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    cfg = runtime.config = runtime.config or load_config()
    configure(settings, cfg)
    if cfg.metrics_port:
        authorize = DelegatedAuthorizer(load_api_client(4)).verdict if cfg.metrics_auth == "kubernetes" else None
        serve_metrics(metrics.REGISTRY, cfg.metrics_port, cfg.metrics_bind_address, authorize,
                      cfg.metrics_cert_file, cfg.metrics_key_file)
    api = load_api_client(cfg.create_concurrency + cfg.workers + 4)
    controller = Controller(cfg, KubeClient(api, cfg.api_qps, cfg.api_burst), asyncio.get_running_loop())
    await controller.start()
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


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def on_job_event(event: kopf.RawEvent, **_: Any) -> None:
    """Async on purpose: kopf runs sync handlers in a worker thread, and the controller's queue
    and job cache belong to the event loop (a thread's put would not wake a waiting worker)."""
    controller = runtime.controller
    if controller is None:
        return
    body = event.get("object") or {}
    # kopf hands a live Body view; keep a plain dict snapshot.
    controller.job_event(event.get("type"), _plain(body))


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


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict) or hasattr(obj, "items"):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj
