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
_state: dict[str, Any] = {}
# After losing the Lease, kopf's graceful stop gets this long before the process ends anyway.
EXIT_GRACE_SECONDS = 20.0


def configure(settings: kopf.OperatorSettings, cfg: OperatorConfig) -> None:
    settings.persistence.finalizer = f"{c.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=c.GROUP)
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    settings.scanning.disabled = True  # we know our CRD; no need for cluster-wide CRD/namespace lists


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    cfg = _state.get("config") or load_config()
    _state["config"] = cfg
    configure(settings, cfg)
    if cfg.metrics_port:
        authorize = DelegatedAuthorizer(load_api_client(4)).verdict if cfg.metrics_auth == "kubernetes" else None
        serve_metrics(metrics.REGISTRY, cfg.metrics_port, cfg.metrics_bind_address, authorize,
                      cfg.metrics_cert_file, cfg.metrics_key_file)
    api = load_api_client(cfg.create_concurrency + cfg.workers + 4)
    controller = Controller(cfg, KubeClient(api, cfg.api_qps, cfg.api_burst), asyncio.get_running_loop())
    await controller.start()
    _state["controller"] = controller
    election = cfg.leader_election
    if not election.enabled:
        controller.start_workers()
        return
    leases = LeaseClient(load_api_client(4), election.namespace, election.lease_name)
    elector = LeaderElector(leases, election.identity, election.timings,
                            on_started_leading=controller.start_workers, on_stopped_leading=_stopped_leading)
    _state["elector"] = elector
    elector.start()  # in the background: kopf serves /healthz only after startup returns


def _stopped_leading(reason: str) -> None:
    """client-go's OnStoppedLeading in kube-controller-manager: stop writing at once, then exit
    non-zero, so Kubernetes restarts the pod clean and it campaigns again as a standby."""
    controller: Controller | None = _state.get("controller")
    if controller is not None:
        controller.fence()
    log.error("leader election: stopped leading (%s); workers stopped; exiting so that the pod restarts clean",
              reason)
    _state["exit_code"] = 1
    stop_flag: asyncio.Event | None = _state.get("stop_flag")
    if stop_flag is not None:
        stop_flag.set()
    timer = threading.Timer(EXIT_GRACE_SECONDS, os._exit, (1,))  # if kopf's stop hangs, end it anyway
    timer.daemon = True
    timer.start()


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    """Workers first, the Lease after: the next leader must not overlap with our last writes."""
    controller = _state.pop("controller", None)
    if controller is not None:
        await controller.stop()
    elector: LeaderElector | None = _state.pop("elector", None)
    if elector is not None:
        await elector.stop(release_lease=True)


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def on_job_event(event: kopf.RawEvent, **_: Any) -> None:
    """Async on purpose: kopf runs sync handlers in a worker thread, and the controller's queue
    and job cache belong to the event loop (a thread's put would not wake a waiting worker)."""
    controller: Controller | None = _state.get("controller")
    if controller is None:
        return
    body = event.get("object") or {}
    # kopf hands a live Body view; keep a plain dict snapshot.
    controller.job_event(event.get("type"), _plain(body))


@kopf.on.probe(id="progress")
def probe_progress(**_: Any) -> str:
    """Liveness that means something: /healthz answers 500 when the pod watch or a worker is wedged."""
    controller: Controller | None = _state.get("controller")
    why = controller.stuck() if controller else None
    if why:
        raise kopf.PermanentError(why)
    return "ok"


@kopf.on.probe(id="jobs")
def probe_jobs(**_: Any) -> int:
    controller: Controller | None = _state.get("controller")
    return len(controller.jobs) if controller else 0


@kopf.on.probe(id="role")
async def probe_role(**_: Any) -> str:
    """``leader`` or ``standby``; either way the replica is alive (liveness stays green)."""
    elector: LeaderElector | None = _state.get("elector")
    if elector is not None:
        return elector.role
    controller: Controller | None = _state.get("controller")
    return "leader" if controller is not None and controller.working else "standby"


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict) or hasattr(obj, "items"):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj
