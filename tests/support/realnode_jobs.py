"""Jobs of the trainer image on the real node, and what they leave behind: their shared work
directory, their reports, their logs and their processes on this host (e2e tests)."""

from __future__ import annotations

import json
from pathlib import Path

from devcluster import stack
from devcluster.state import LOGS
from tests.support.builders import JobBuilder
from tests.support.cluster import kubectl
from tests.support.waits import TimedOut, wait_until


def trainer_job(name: str, args: list[str], replicas: int = 2, command: list[str] | None = None,
                backoff_limit: int | None = None) -> dict:
    """``replicas`` CPU ranks of the trainer image built here, on the real node, running ``args``."""
    job = (JobBuilder(name).replicas(replicas).image(stack.trainer_image()).args(args)
           .requests(cpu="300m", memory="512Mi"))
    if command:
        job.command(command)
    if backoff_limit is not None:
        job.run_policy(backoffLimit=backoff_limit)
    return stack.run_on_real_node(job.obj())


def workdir(namespace: str, name: str) -> Path:
    return stack.SHARED_DIR / namespace / name


def reports(namespace: str, name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((workdir(namespace, name) / "report").glob("report-rank*.json"))]


def log_lines(namespace: str, pod: str, since: str | None = None) -> list[dict]:
    """The trainer container's JSON log lines (its current container), in order; other lines are
    skipped. ``since``: only lines logged at or after this RFC 3339 time (``kubectl logs --since-time``)."""
    out = kubectl("logs", "-n", namespace, pod, "-c", "trainer", *([f"--since-time={since}"] if since else []),
                  check=False)
    return _json_lines(out.stdout)


def _json_lines(text: str) -> list[dict]:
    """The JSON objects the trainer logged, one per line. A line may carry text before its object:
    the kubelet prints a partial CRI log line (longer than containerd's 16 KiB, or cut off where its
    stream closed) without a newline, so the object is decoded from where it starts."""
    decoder = json.JSONDecoder()
    lines = []
    for line in text.splitlines():
        start = line.find("{")
        while start != -1:
            try:
                item, _ = decoder.raw_decode(line, start)
            except json.JSONDecodeError:
                start = line.find("{", start + 1)
                continue
            if isinstance(item, dict) and "event" in item:
                lines.append(item)
            break
    return lines


def log_events(namespace: str, pod: str, event: str) -> list[dict]:
    return [item for item in log_lines(namespace, pod) if item.get("event") == event]


def wait_log_event(namespace: str, pod: str, event: str, timeout: float, what: str) -> list[dict]:
    """Wait until the trainer in ``pod`` has logged ``event``; a timeout says what ``kubectl logs``
    answered last (its error, or the last lines it returned), not only that the event never came."""
    last: dict[str, str] = {}

    def logged() -> list[dict]:
        out = kubectl("logs", "-n", namespace, pod, "-c", "trainer", check=False)
        last.update(rc=str(out.returncode), stderr=out.stderr.strip()[-300:], whole=out.stdout,
                    tail=" | ".join(out.stdout.splitlines()[-3:])[-300:])
        return [item for item in _json_lines(out.stdout) if item.get("event") == event]

    try:
        return wait_until(logged, timeout=timeout, interval=0.5, what=what)
    except TimedOut as e:
        kept = LOGS / f"{namespace}-{pod}-trainer.log"
        kept.write_text(last.get("whole", ""))
        raise TimedOut(f"{e}; kubectl logs {pod} exited {last.get('rc')}: {last.get('stderr') or 'no error'}; "
                       f"its last lines: {last.get('tail') or 'none'}; the whole log is in {kept}") from None


def training_pids(namespace: str, name: str, rank: int) -> list[int]:
    """The training processes a warm-restart supervisor forked (dpjob_trainer/warm.py): the trainer
    processes whose parent is one too. Killing these leaves the container running."""
    pids = container_pids(namespace, name, rank)
    parents = {}
    for pid in pids:
        try:
            parents[pid] = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return [pid for pid, parent in parents.items() if parent in pids]


def container_pids(namespace: str, name: str, rank: int) -> list[int]:
    """The trainer's processes on this host, found by the environment the operator gave them."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(kv.split("=", 1) for kv in (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in kv)
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if env.get("DPJOB_NAMESPACE") == namespace and env.get("DPJOB_NAME") == name and \
                env.get("DPJOB_NODE_RANK") == str(rank) and b"dpjob_trainer" in cmd:
            pids.append(int(proc.name))
    return pids
