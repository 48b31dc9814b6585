"""``dpjob run``: pack the script, create the job and its ConfigMap, then (optionally) follow it to its end.

The job is created first because the ConfigMap's owner reference needs the job's uid: deleting the
job (or its TTL) then garbage-collects the script too. Rank pods that start before the ConfigMap
exists simply wait in ContainerCreating for the kubelet's next mount attempt. If the ConfigMap
cannot be created, the job is deleted again, so a failed ``run`` leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpjob_cli.errors import CliError, WaitTimeoutError
from dpjob_cli.kube import Kube
from dpjob_cli.manifest import RunOptions, build_job, build_source_configmap, job_name_for
from dpjob_cli.pack import Packed, pack
from dpjob_cli.status import is_terminal


@dataclass(frozen=True)
class Plan:
    """What ``run`` will create: the job, and the ConfigMap of the packed files (None with --in-image)."""

    job: dict[str, Any]
    configmap: dict[str, Any] | None
    packed: Packed | None


def plan_run(opts: RunOptions, directory: Path | None = None, requirements: Path | None = None) -> Plan:
    """Read and size-check the files, name the job, build both objects (nothing is sent)."""
    packed = None if opts.in_image else pack(Path(opts.script), directory, requirements)
    name = opts.name or job_name_for(opts.script)
    job = build_job(opts, name, packed)
    return Plan(job=job, configmap=build_source_configmap(job, packed) if packed else None, packed=packed)


def submit(kube: Kube, plan: Plan) -> dict[str, Any]:
    """Create the job, then its ConfigMap owned by it; returns the created job."""
    namespace = plan.job["metadata"]["namespace"]
    created = kube.create_job(namespace, plan.job)
    if plan.packed is not None:
        try:
            kube.create_configmap(namespace, build_source_configmap(created, plan.packed))
        except CliError:
            with contextlib.suppress(CliError):  # the original error is the one to report
                kube.delete_job(namespace, created["metadata"]["name"])
            raise
    return created


class PhaseWatch:
    """Polls a job until it is finished, telling ``on_change`` about every new phase; enforces a timeout."""

    def __init__(self, kube: Kube, namespace: str, name: str, timeout: float | None = None,
                 on_change: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.deadline = time.monotonic() + timeout if timeout else None
        self.timeout = timeout
        self.on_change = on_change
        self.job: dict[str, Any] = {}
        self._phase: str | None = None

    def finished(self) -> bool:
        self.job = self.kube.get_job(self.namespace, self.name)
        phase = (self.job.get("status") or {}).get("phase", "Pending")
        if phase != self._phase:
            self._phase = phase
            if self.on_change:
                self.on_change(self.job)
        if is_terminal(self.job):
            return True
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise WaitTimeoutError(f"job {self.name} is still {phase} after {self.timeout:.0f}s; it keeps running: "
                                   f"`dpjob status {self.name} -n {self.namespace}`")
        return False

    def wait(self, poll: float = 2.0) -> dict[str, Any]:
        """Block until the job is Succeeded or Failed; returns its final object."""
        while not self.finished():
            time.sleep(poll)
        return self.job
