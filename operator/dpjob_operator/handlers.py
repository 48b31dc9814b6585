"""kopf wiring, kept thin: settings, startup/cleanup, and one event handler that enqueues.

No change-detecting handlers (on.create/update) on the job and none at all on Pods: those
write diff-base and progress annotations and cost PATCHes; ``on.event`` writes nothing, and
the controller's level-triggered reconcile does the rest.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
from prometheus_client import start_http_server

from dpjob_operator import metrics
from dpjob_operator.api import constants as c
from dpjob_operator.config import OperatorConfig, load_config
from dpjob_operator.controller import Controller
from dpjob_operator.k8s.client import KubeClient, load_api_client

log = logging.getLogger("dpjob")
_state: dict[str, Any] = {}


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
        start_http_server(cfg.metrics_port, registry=metrics.REGISTRY)
    api = load_api_client(cfg.create_concurrency + cfg.workers + 4)
    controller = Controller(cfg, KubeClient(api, cfg.api_qps, cfg.api_burst), asyncio.get_running_loop())
    await controller.start()
    _state["controller"] = controller


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    controller = _state.pop("controller", None)
    if controller is not None:
        await controller.stop()


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


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict) or hasattr(obj, "items"):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj
