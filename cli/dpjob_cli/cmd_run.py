"""``dpjob run SCRIPT [-- ARGS]``: from a script on a laptop to a running job, its logs and its result.

dpjob's own options are dpjob's wherever they stand (``dpjob run train.py -n team-a`` creates the job
in team-a, as kubectl would); everything after a bare ``--`` goes to the script, and so do options
dpjob does not know.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.manifest import DEFAULT_IMAGES, RunOptions
from dpjob_cli.options import connection_options
from dpjob_cli.output import dump_documents
from dpjob_cli.run import plan_run, submit
from dpjob_cli.sdk import JobHandle
from dpjob_cli.session import Session
from dpjob_cli.status import failure_summary


def parse_env(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
        pairs.append((key, value))
    return tuple(pairs)


_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def label_value(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A Kueue name the job carries as a label value: at most 63 letters, digits, '-', '_', '.'."""
    if value is not None and not _LABEL_VALUE.match(value):
        raise click.BadParameter(f"{value!r} is not a valid name (at most 63 letters, digits, '-', '_' or '.', "
                                 "starting and ending with a letter or digit)")
    return value


def report_phase(job: dict[str, Any]) -> None:
    """One stderr line per phase change while following (stdout carries only the ranks' lines)."""
    status = job.get("status") or {}
    detail = status.get("message") or status.get("reason") or ""
    ready = f" ready {status['ready']}" if status.get("ready") else ""
    click.echo(f"[dpjob] {job['metadata']['name']}: {status.get('phase', 'Pending')}{ready}"
               + (f" ({detail})" if detail else ""), err=True)


def finish(job: dict[str, Any]) -> int:
    """Exit code of a finished job: 0 Succeeded; Failed raises the one-line failure summary (exit 1)."""
    name = job["metadata"]["name"]
    if (job.get("status") or {}).get("phase") == "Succeeded":
        click.echo(f"[dpjob] job {name} Succeeded", err=True)
        return int(ExitCode.OK)
    raise CliError(ExitCode.JOB_FAILED, f"job {name} failed: {failure_summary(job)}")


def interrupted(name: str, namespace: str) -> CliError:
    return CliError(ExitCode.INTERRUPTED,
                    f"stopped following; job {name} keeps running in namespace {namespace}. Reattach: "
                    f"dpjob logs {name} -n {namespace} --all -f  (stop it: dpjob delete {name} -n {namespace})")


def follow_to_end(handle: JobHandle, follow: bool, timeout: float | None) -> int:
    """Stream every rank (or just wait) until the job ends; Ctrl-C leaves it running."""
    try:
        if follow:
            for line in handle.logs(all_ranks=True, follow=True, timeout=timeout, on_change=report_phase):
                click.echo(line)
        else:
            handle.wait(timeout=timeout, on_change=report_phase)
    except KeyboardInterrupt:
        raise interrupted(handle.name, handle.namespace) from None
    return finish(handle.get())


@click.command(context_settings={"ignore_unknown_options": True},
               short_help="Run a script on every rank; follow it to its result.")
@click.argument("script", metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[-- ARGS...]")
@click.option("-r", "--replicas", type=click.IntRange(1, 10000), default=1, show_default=True, help="Rank pods.")
@click.option("-p", "--procs", type=click.IntRange(1, 128), default=1, show_default=True,
              help="Processes per pod; more than 1 launches the script with torchrun (msrun, oneflow's launcher).")
@click.option("--accelerator", type=click.Choice(sorted(DEFAULT_IMAGES)), default="cpu", show_default=True)
@click.option("--framework", type=click.Choice(["pytorch", "mindspore", "oneflow"]), default="pytorch",
              show_default=True)
@click.option("--image", metavar="IMG", help="Container image (default: ghcr.io/dpjob/trainer:<cpu|cuda|npu>).")
@click.option("--requirements", type=click.Path(path_type=Path), metavar="FILE",
              help="pip requirements installed in every rank before the script starts.")
@click.option("--dir", "directory", type=click.Path(path_type=Path), metavar="DIR",
              help="Pack this whole directory (it must contain SCRIPT), not just the script.")
@click.option("--in-image", is_flag=True, help="SCRIPT is a path inside --image: pack nothing.")
@click.option("--name", help="Job name (default: the script's name and a random suffix).")
@click.option("-e", "--env", multiple=True, metavar="KEY=VALUE", callback=parse_env, help="Extra environment.")
@click.option("--cpu", metavar="QTY", help="CPU request per rank pod, e.g. 500m.")
@click.option("--memory", metavar="QTY", help="Memory request per rank pod, e.g. 1Gi.")
@click.option("--backoff-limit", type=click.IntRange(0), default=0, show_default=True,
              help="Gang restarts allowed after a failure (0: the first failure fails the job).")
@click.option("--queue", metavar="NAME", callback=label_value,
              help="Kueue LocalQueue: the job waits until Kueue admits it (label kueue.x-k8s.io/queue-name).")
@click.option("--priority", metavar="CLASS", callback=label_value,
              help="Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class); needs --queue.")
@click.option("-f", "--follow", is_flag=True, help="Stream every rank's log; exit with the job's result.")
@click.option("--wait", "wait_", is_flag=True, help="Wait without logs; exit with the job's result.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Give up following/waiting after this long (exit 8; the job keeps running).")
@click.option("--dry-run", is_flag=True, help="Print the DataParallelJob and ConfigMap; create nothing.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="Format of --dry-run.")
@connection_options
@click.pass_obj
def run(session: Session, /, script: str, args: tuple[str, ...], directory: Path | None, requirements: Path | None,
        follow: bool, wait_: bool, timeout: float | None, dry_run: bool, output: str, **flags: Any) -> int:
    """Run SCRIPT on every rank of a new job (the script travels in a ConfigMap the job owns).

    Everything after a bare `--` is passed to SCRIPT (`dpjob run train.py -n team-a -- --epochs 3`),
    and so are options dpjob does not know; dpjob's own options are dpjob's wherever they stand.
    With one process per pod the script runs as `python SCRIPT ARGS` (RANK, WORLD_SIZE and MASTER_*
    come from the operator); with --procs N > 1 as `torchrun SCRIPT ARGS`.
    """
    if flags.get("priority") and not flags.get("queue"):
        raise click.UsageError("--priority needs --queue: Kueue gives a priority only to a job it queues")
    # Local input first: a missing or oversized script is reported even without a cluster.
    namespace = session.namespace_offline()
    opts = RunOptions(script=script, args=args, namespace=namespace, **flags)
    plan = plan_run(opts, directory, requirements)
    if dry_run:
        click.echo(dump_documents([d for d in (plan.job, plan.configmap) if d is not None], output))
        return int(ExitCode.OK)
    created = submit(session.client().kube, plan)
    name = created["metadata"]["name"]
    click.echo(f"dataparalleljob.dpjob.io/{name} created")
    if not (follow or wait_):
        click.echo(f"[dpjob] follow: dpjob logs {name} -n {namespace} --all -f   status: dpjob status {name} "
                   f"-n {namespace}", err=True)
        return int(ExitCode.OK)
    return follow_to_end(JobHandle(session.client().kube, namespace, name), follow, timeout)
