"""Every rank's log in one stream, each line prefixed ``[rank N]``, followed across gang restarts.

A gang restart deletes every rank pod and creates new ones under the same names, so following "a
pod" is not enough: the follower lists the job's pods every poll, starts one reader thread per pod
*uid* whose trainer container has started, and merges their lines through a queue. It stops once
the caller says the job is finished and every reader has reached the end of its container's log.
``LogOptions`` (``--tail``, ``--since``, ``--previous``, ``--timestamps``) say which part of each log
is read; a follower applies ``--tail`` and ``--since`` to the containers that had started when it
began, and reads a container that starts later from its first line.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.log_options import WHOLE_LOG, LogOptions
from dpjob_operator.api import constants as c

NOTICE = "[dpjob]"


class LogSource(Protocol):
    """What the follower needs of the cluster (``kube.Kube`` in production)."""

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...
    def read_log(self, namespace: str, pod: str, container: str, options: LogOptions = WHOLE_LOG) -> str: ...
    def stream_log(self, namespace: str, pod: str, container: str,
                   options: LogOptions = WHOLE_LOG) -> Iterator[str]: ...


def job_selector(job_name: str) -> str:
    return f"{c.LABEL_JOB}={job_name}"


def rank_of(pod: dict[str, Any]) -> int:
    return int((pod.get("metadata", {}).get("labels") or {}).get(c.LABEL_RANK, -1))


def generation_of(pod: dict[str, Any]) -> int:
    return int((pod.get("metadata", {}).get("labels") or {}).get(c.LABEL_RESTART, 0))


def prefixed(rank: int, line: str) -> str:
    return f"[rank {rank}] {line}"


def trainer_status(pod: dict[str, Any]) -> dict[str, Any]:
    """The trainer container's entry of ``status.containerStatuses`` ({} before the kubelet reports one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == c.TRAINER_CONTAINER:
            return dict(status)
    return {}


def trainer_started(pod: dict[str, Any]) -> bool:
    """True once the trainer container has a log to read (running or already terminated)."""
    state = trainer_status(pod).get("state") or {}
    return "running" in state or "terminated" in state


def has_previous(pod: dict[str, Any]) -> bool:
    """True once the trainer has restarted in its pod, so that an earlier instance's log may exist."""
    status = trainer_status(pod)
    return int(status.get("restartCount") or 0) > 0 or "terminated" in (status.get("lastState") or {})


def unreadable(pod: dict[str, Any], previous: bool) -> str | None:
    """Why this pod has no log to read yet (the notice's words), or None."""
    if previous and not has_previous(pod):
        return "has no previous trainer instance (it has not restarted in its pod)"
    if not previous and not trainer_started(pod):
        return "has not started yet"
    return None


def select_pods(pods: Sequence[dict[str, Any]], ranks: set[int] | None) -> list[dict[str, Any]]:
    """The newest generation's pods of ``ranks`` (None: all), in rank order; deleting pods are skipped."""
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    if not live:
        return []
    newest = max(generation_of(p) for p in live)
    chosen = [p for p in live if generation_of(p) == newest and (ranks is None or rank_of(p) in ranks)]
    return sorted(chosen, key=rank_of)


def pods_to_follow(pods: Sequence[dict[str, Any]], seen: set[str], ranks: set[int] | None) -> list[dict[str, Any]]:
    """Pods not followed yet whose trainer has started, oldest generation first, then by rank."""
    fresh = [p for p in pods if p["metadata"].get("uid") not in seen and trainer_started(p)
             and (ranks is None or rank_of(p) in ranks)]
    return sorted(fresh, key=lambda p: (generation_of(p), rank_of(p)))


def read_logs(source: LogSource, namespace: str, job_name: str, ranks: set[int] | None,
              prefix: bool, options: LogOptions = WHOLE_LOG) -> list[str]:
    """The current gang's logs so far (``dpjob logs`` without -f), rank by rank, the part ``options`` say."""
    pods = select_pods(source.list_pods(namespace, job_selector(job_name)), ranks)
    if not pods:
        wanted = "" if ranks is None else f" with rank {', '.join(str(r) for r in sorted(ranks))}"
        raise CliError(ExitCode.NOT_FOUND, f"job {job_name} has no rank pods{wanted} (yet): `dpjob status {job_name}`")
    out: list[str] = []
    for pod in pods:
        why = unreadable(pod, options.previous)
        if why:
            out.append(f"{NOTICE} rank {rank_of(pod)} {why}")
            continue
        try:
            text = source.read_log(namespace, pod["metadata"]["name"], c.TRAINER_CONTAINER, options)
        except CliError as exc:
            # The kubelet keeps one ended instance, but may have removed it: one rank's missing
            # previous log should not hide the other ranks' logs.
            if not options.previous or exc.code != ExitCode.API_ERROR:
                raise
            out.append(f"{NOTICE} rank {rank_of(pod)} has no previous trainer log: {exc.message}")
            continue
        out += [prefixed(rank_of(pod), line) if prefix else line for line in text.splitlines()]
    return out


class LogFollower:
    """Merged, prefixed lines of a job's ranks until ``finished()`` and every reader is done."""

    def __init__(self, source: LogSource, namespace: str, job_name: str, ranks: set[int] | None = None,
                 poll: float = 1.0, grace: float = 15.0, prefix: bool = True,
                 options: LogOptions = WHOLE_LOG) -> None:
        if options.previous:
            raise ValueError("a previous trainer instance has ended: read it with read_logs, not a follower")
        self.source, self.namespace, self.job_name, self.ranks = source, namespace, job_name, ranks
        self.poll, self.grace, self.prefix, self.options = poll, grace, prefix, options
        self._listed = False  # whether the first pod listing is done: later containers are read in full
        self._queue: queue.Queue[str] = queue.Queue()
        self._seen: set[str] = set()
        self._readers: list[threading.Thread] = []
        self._generation: int | None = None

    def _read(self, pod: str, rank: int, options: LogOptions) -> None:
        try:
            for line in self.source.stream_log(self.namespace, pod, c.TRAINER_CONTAINER, options):
                self._queue.put(prefixed(rank, line) if self.prefix else line)
        except CliError as exc:
            # A pod deleted by a gang restart ends its stream (gone, or cut mid-read); a cluster that is
            # really gone fails the job polling in the main loop, loudly. Anything else is news.
            if exc.code not in (ExitCode.NOT_FOUND, ExitCode.NO_CLUSTER):
                self._queue.put(f"{NOTICE} log of {pod} ended: {exc.message}")

    def _start_new_readers(self) -> None:
        pods = self.source.list_pods(self.namespace, job_selector(self.job_name))
        options = self.options.for_later_container() if self._listed else self.options
        self._listed = True
        for pod in pods_to_follow(pods, self._seen, self.ranks):
            generation = generation_of(pod)
            if self._generation is not None and generation > self._generation:
                self._queue.put(f"{NOTICE} gang restart {generation}: following the new rank pods")
            self._generation = max(generation, self._generation or 0)
            self._seen.add(pod["metadata"]["uid"])
            reader = threading.Thread(target=self._read, args=(pod["metadata"]["name"], rank_of(pod), options),
                                      name=f"log-{pod['metadata']['name']}", daemon=True)
            reader.start()
            self._readers.append(reader)

    def _drain(self, timeout: float) -> Iterator[str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                yield self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return

    def lines(self, finished: Callable[[], bool]) -> Iterator[str]:
        """Yield lines as they come; returns once ``finished()`` and the readers ended (or ``grace`` passed)."""
        done_at: float | None = None
        while True:
            if done_at is None and finished():
                done_at = time.monotonic()  # one more pod listing below catches ranks that ended quickly
            self._start_new_readers()
            yield from self._drain(self.poll)
            if done_at is not None and (not any(r.is_alive() for r in self._readers)
                                        or time.monotonic() - done_at > self.grace):
                yield from self._drain(0.2)
                return
