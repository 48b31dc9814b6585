"""The Python API, for notebooks and scripts: the same verbs as the CLI, which is built on it.

    from dpjob_cli import Client, LogOptions
    job = Client().run("train.py", ["--epochs", "3"], replicas=2)
    for line in job.logs(all_ranks=True, follow=True):
        print(line)
    last = list(job.logs(options=LogOptions(tail=20, previous=True)))   # dpjob logs JOB --tail 20 -p
    job.wait()            # "Succeeded" or "Failed"; raise_on_failure=True raises JobFailedError
    job.status()["ranks"]
    job.describe()["events"]
    job.delete()

Errors are ``dpjob_cli.errors.CliError`` (with ``.code`` and a one-line ``.message``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dpjob_cli.describe import event_rows
from dpjob_cli.errors import CliError, ExitCode, JobFailedError
from dpjob_cli.explain import explain_file
from dpjob_cli.kube import Kube
from dpjob_cli.log_options import WHOLE_LOG, LogOptions, conflict
from dpjob_cli.logs import LogFollower, job_selector, read_logs
from dpjob_cli.manifest import RunOptions
from dpjob_cli.run import PhaseWatch, plan_run, submit
from dpjob_cli.status import failure_summary, list_row, status_view


class JobHandle:
    """One DataParallelJob: its status, logs, result, deletion."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name

    def __repr__(self) -> str:
        return f"JobHandle({self.namespace}/{self.name})"

    def get(self) -> dict[str, Any]:
        """The job object as the API server has it."""
        return self.kube.get_job(self.namespace, self.name)

    def phase(self) -> str:
        return str((self.get().get("status") or {}).get("phase", "Pending"))

    def status(self) -> dict[str, Any]:
        """Phase, conditions, restarts, the per-rank table and ``status.progress`` (rank 0's last report)."""
        job = self.get()
        return status_view(job, self.kube.list_pods(self.namespace, job_selector(self.name)))

    def describe(self) -> dict[str, Any]:
        """``status()`` plus restarts by cause, the last stall, avoided nodes and the job's events,
        oldest first (what ``kubectl describe dpj`` lists). Events the user may not list are left
        out, with the reason in ``eventsError``."""
        job = self.get()
        status = job.get("status") or {}
        view = {**status_view(job, self.kube.list_pods(self.namespace, job_selector(self.name))),
                "restartsByReason": status.get("restartsByReason") or {}, "lastStall": status.get("lastStall"),
                "avoidNodes": status.get("avoidNodes"), "events": []}
        try:
            view["events"] = event_rows(self.kube.list_events(self.namespace, job["metadata"].get("uid", "")))
        except CliError as exc:
            view["eventsError"] = exc.message
        return view

    def wait(self, timeout: float | None = None, poll: float = 2.0, raise_on_failure: bool = False,
             on_change: Callable[[dict[str, Any]], None] | None = None) -> str:
        """Block until Succeeded or Failed and return the phase; ``WaitTimeoutError`` after ``timeout`` s."""
        job = PhaseWatch(self.kube, self.namespace, self.name, timeout, on_change).wait(poll)
        phase = str(job["status"]["phase"])
        if raise_on_failure and phase == "Failed":
            raise JobFailedError(f"job {self.name} failed: {failure_summary(job)}")
        return phase

    def logs(self, rank: int | None = None, all_ranks: bool = False, follow: bool = False,
             timeout: float | None = None,
             on_change: Callable[[dict[str, Any]], None] | None = None,
             options: LogOptions = WHOLE_LOG) -> Iterator[str]:
        """Lines of rank ``rank`` (default 0), or of every rank with a ``[rank N]`` prefix.

        ``follow`` streams until the job finishes, across gang restarts; ``on_change`` hears of
        every new phase; ``WaitTimeoutError`` after ``timeout`` seconds. ``options``: the last lines
        only, the newer ones only, the trainer's previous instance, timestamps (``LogOptions``;
        ``previous`` with ``follow`` is a ``CliError`` USAGE).
        """
        why = conflict(options, follow)
        if why:
            raise CliError(ExitCode.USAGE, why)
        ranks = None if all_ranks else {0 if rank is None else rank}
        if not follow:
            yield from read_logs(self.kube, self.namespace, self.name, ranks, prefix=all_ranks, options=options)
            return
        self.get()  # an unknown job fails now, with its one-line error, not after the first poll
        watch = PhaseWatch(self.kube, self.namespace, self.name, timeout, on_change)
        follower = LogFollower(self.kube, self.namespace, self.name, ranks, prefix=all_ranks, options=options)
        yield from follower.lines(watch.finished)

    def delete(self) -> None:
        """Delete the job; its pods, Service and ConfigMaps go with it (owner references)."""
        self.kube.delete_job(self.namespace, self.name)


class Client:
    """A cluster and a namespace: ``kubeconfig``/``context`` as kubectl reads them."""

    def __init__(self, namespace: str | None = None, kubeconfig: str | None = None,
                 context: str | None = None) -> None:
        self.kube = Kube(kubeconfig, context)
        self.namespace = namespace or self.kube.default_namespace

    def run(self, script: str, args: Sequence[str] = (), *, directory: str | None = None,
            requirements: str | None = None, **options: Any) -> JobHandle:
        """Pack ``script`` (or ``directory`` around it), create the job, return its handle at once.

        ``options``: replicas, procs, accelerator, framework, image, name, env (dict), cpu, memory,
        backoff_limit, in_image, queue and priority (Kueue's LocalQueue and WorkloadPriorityClass):
        the fields of ``manifest.RunOptions``.
        """
        env = tuple((options.pop("env") or {}).items()) if "env" in options else ()
        opts = RunOptions(script=script, args=tuple(args), namespace=self.namespace, env=env, **options)
        plan = plan_run(opts, Path(directory) if directory else None, Path(requirements) if requirements else None)
        created = submit(self.kube, plan)
        return JobHandle(self.kube, self.namespace, created["metadata"]["name"])

    def job(self, name: str) -> JobHandle:
        """A handle on an existing job (``CliError`` NOT_FOUND when there is none)."""
        handle = JobHandle(self.kube, self.namespace, name)
        handle.get()
        return handle

    def list_jobs(self, all_namespaces: bool = False, selector: str | None = None) -> list[dict[str, Any]]:
        """``kubectl get dpj [-l SELECTOR]`` as data: one row per job."""
        jobs = self.kube.list_jobs(None if all_namespaces else self.namespace, selector)
        return [list_row(j) for j in sorted(jobs, key=lambda j: (j["metadata"].get("namespace", ""),
                                                                  j["metadata"]["name"]))]

    def explain(self, path: str, all_ranks: bool = False) -> list[dict[str, Any]]:
        """Validate a job file on the server and show what the operator would create (nothing is created)."""
        return explain_file(Path(path), self.namespace, self.kube, all_ranks)
