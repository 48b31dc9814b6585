"""The controller's status write (controller/reconciler.py): one merge patch of what the pass changed,
sent only if the job is still the version the pass planned from.

A user would notice: a field the operator dropped that stays in ``kubectl get -o yaml`` (a finished
job's ETA, a straggler that is gone), or a pass planned from an old view overwriting a newer status.

pytest-asyncio is not installed: each test drives its own loop with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.reconciler import Controller, StaleJob
from dpjob_operator.k8s.errors import ApiError

pytestmark = pytest.mark.unit
KEY = ("team", "train")
STORED = {"phase": "Running", "restarts": 1, "worldSize": 4,
          "progress": {"restart": 1, "step": 990, "eta": "2026-11-21T12:00:10Z", "remaining": "10s"}}
FINISHED = {"phase": "Succeeded", "restarts": 1, "worldSize": 4, "completionTime": "2026-11-21T12:00:05Z",
            "progress": {"restart": 1, "step": 1000}}


class StatusSubresource:
    """Answers PATCH .../status as the API server does for one job at resourceVersion ``version``."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.sent: list[tuple[str, str, dict[str, Any], str | None]] = []

    def patch_job_status(self, namespace: str, name: str, status: dict[str, Any],
                         resource_version: str | None = None) -> dict[str, Any]:
        self.sent.append((namespace, name, copy.deepcopy(status), resource_version))
        if resource_version != self.version:
            raise ApiError(status=409, reason="Conflict")
        return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": "8"}, "status": FINISHED}


def write(server: StatusSubresource, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Run the controller's write of ``status`` over ``body``; returns the body it holds afterwards."""
    controller = object.__new__(Controller)  # only the write's collaborators: no watches, no workers
    controller.kube = server

    async def run() -> dict[str, Any]:
        controller.blocking = Blocking(asyncio.get_running_loop(), 1, 1)
        controller.jobs = {KEY: body}
        try:
            await controller._write_status(KEY, body, status)
        finally:
            controller.blocking.shutdown()
        return controller.jobs[KEY]

    return asyncio.run(run())


def job(version: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "team", "name": "train", "resourceVersion": version},
            "status": copy.deepcopy(STORED)}


def test_the_write_sends_only_what_changed_with_the_version_it_planned_from() -> None:
    server = StatusSubresource("7")
    held = write(server, job("7"), FINISHED)
    assert server.sent == [("team", "train", {"phase": "Succeeded", "completionTime": "2026-11-21T12:00:05Z",
                                              "progress": {"step": 1000, "eta": None, "remaining": None}}, "7")]
    assert held["metadata"]["resourceVersion"] == "8", "the next pass plans from the server's answer"


def test_a_pass_planned_from_an_old_version_writes_nothing() -> None:
    server = StatusSubresource("9")
    body = job("7")
    with pytest.raises(StaleJob):
        write(server, body, FINISHED)
    assert body["status"] == STORED and body["metadata"]["resourceVersion"] == "7"
