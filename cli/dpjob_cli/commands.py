"""The commands on existing jobs and files: explain, logs, status, describe, list, delete, wait.

Each is a thin layer over the SDK (``sdk.Client`` / ``sdk.JobHandle``) plus ``output`` for the
format, so the Python API and the CLI cannot disagree.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.shell_completion import CompletionItem

from dpjob_cli.cmd_run import follow_to_end, interrupted
from dpjob_cli.describe import render_describe
from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.explain import explain_file
from dpjob_cli.explain_render import render_explanation
from dpjob_cli.log_options import LogOptions, conflict, duration_seconds
from dpjob_cli.options import GET_OUTPUT, TIMEOUT, connection_options, connection_value
from dpjob_cli.output import FORMATS, dump, render, table
from dpjob_cli.sdk import Client
from dpjob_cli.session import Session
from dpjob_cli.status import COLUMNS, WIDE, render_status

OUTPUT = click.option("-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True)
RESOURCE = "dataparalleljob.dpjob.io"


def complete_jobs(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of JOB: the jobs of the namespace the command line names (silent without a
    cluster: an error here would print in the middle of the user's command line)."""
    try:
        rows = Client(connection_value(ctx, "namespace"), connection_value(ctx, "kubeconfig"),
                      connection_value(ctx, "context")).list_jobs()
    except Exception:  # noqa: BLE001 - no cluster, a bad kubeconfig, a timeout: offer nothing
        return []
    return [CompletionItem(r["name"]) for r in rows if str(r["name"]).startswith(incomplete)]


JOB = click.argument("job", shell_complete=complete_jobs)


def _files(paths: tuple[Path, ...]) -> list[Path]:
    """-f takes files and folders (every *.yaml / *.yml in it, sorted), like kubectl."""
    out: list[Path] = []
    for path in paths:
        out += sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
    return out


@click.command(short_help="Validate a job file; show what it would create.")
@click.option("-f", "--filename", "paths", multiple=True, required=True, type=click.Path(path_type=Path),
              help="A job file, or a folder of them (repeatable).")
@click.option("--offline", is_flag=True, help="No cluster: skip the server dry run and the capacity check.")
@click.option("--all-ranks", is_flag=True, help="Show every rank, not just 0, 1 and the last.")
@OUTPUT
@connection_options
@click.pass_obj
def explain(session: Session, paths: tuple[Path, ...], offline: bool, all_ranks: bool, output: str) -> int:
    """Validate a job on the server (dry run) and show what the operator would create. Creates nothing.

    The pods (node pool, resources), every rank's environment, the rank-table layout and whether the
    gang fits the cluster's free capacity now, all computed by the operator's own code.
    """
    namespace = session.namespace_offline() if offline else session.client().namespace
    kube = None if offline else session.client().kube
    results = []
    try:
        for path in _files(paths):
            results += explain_file(path, namespace, kube, all_ranks)
    except CliError as exc:
        if exc.code == ExitCode.NO_CLUSTER:
            raise CliError(exc.code, f"{exc.message} (`dpjob explain --offline` works without a cluster)") from None
        raise
    if output == "table":
        click.echo("\n\n".join(render_explanation(r) for r in results))
    else:
        click.echo(dump(results if len(results) > 1 else results[0], output))
    return int(ExitCode.OK)


@click.command()
@JOB
@click.option("--rank", type=click.IntRange(0), help="This rank only (default: rank 0).")
@click.option("--all", "all_ranks", is_flag=True, help="Every rank, each line prefixed [rank N].")
@click.option("-f", "--follow", is_flag=True, help="Stream until the job ends, across gang restarts.")
@click.option("--tail", type=click.IntRange(0), metavar="N", help="The last N lines of each rank's log.")
@click.option("--since", "since_seconds", callback=duration_seconds, metavar="DURATION",
              help="Only lines newer than this: 5s, 2m, 1h, 1h30m.")
@click.option("-p", "--previous", is_flag=True,
              help="The trainer's previous instance in the same pod (after a restart in place); not with -f.")
@click.option("--timestamps", is_flag=True, help="Start each line with its time (RFC 3339), as kubectl's.")
@TIMEOUT
@connection_options
@click.pass_obj
def logs(session: Session, job: str, rank: int | None, all_ranks: bool, follow: bool, tail: int | None,
         since_seconds: int | None, previous: bool, timestamps: bool, timeout: float | None) -> int:
    """Print the trainer logs of a job's ranks."""
    if rank is not None and all_ranks:
        raise click.UsageError("--rank and --all exclude each other")
    options = LogOptions(tail=tail, since_seconds=since_seconds, previous=previous, timestamps=timestamps)
    why = conflict(options, follow)
    if why:
        raise click.UsageError(why)
    handle = session.client().job(job)
    try:
        for line in handle.logs(rank, all_ranks, follow, timeout, options=options):
            click.echo(line)
    except KeyboardInterrupt:
        raise interrupted(handle.name, handle.namespace) from None
    return int(ExitCode.OK)


@click.command(short_help="Phase, progress, conditions, per-rank table.")
@JOB
@GET_OUTPUT
@connection_options
@click.pass_obj
def status(session: Session, job: str, output: str) -> int:
    """Phase, restarts, progress (status.progress), the last failure, conditions and a per-rank table."""
    view = session.client().job(job).status()
    if output == "name":
        click.echo(f"{RESOURCE}/{view['name']}")
    else:
        click.echo(render(view, "table" if output == "wide" else output,
                          lambda data: render_status(data, wide=output == "wide")))
    return int(ExitCode.OK)


@click.command(short_help="Everything about a job: conditions, restarts, last failure, events.")
@JOB
@OUTPUT
@connection_options
@click.pass_obj
def describe(session: Session, job: str, output: str) -> int:
    """Like `kubectl describe dpj`: the summary, progress, restarts by cause, the last failure with
    its message, the last stall, avoided nodes, conditions, one row per rank and the job's events."""
    click.echo(render(session.client().job(job).describe(), output, render_describe))
    return int(ExitCode.OK)


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs of every namespace.")
@click.option("-l", "--selector", metavar="SELECTOR", help="Label selector, e.g. team=a,tier!=test (as kubectl's).")
@GET_OUTPUT
@connection_options
@click.pass_obj
def list_jobs(session: Session, all_namespaces: bool, selector: str | None, output: str) -> int:
    """List jobs with the columns of `kubectl get dpj` (-o wide: reason, loss, samples/s)."""
    rows = session.client().list_jobs(all_namespaces, selector)
    if output == "name":
        click.echo("\n".join(f"{RESOURCE}/{row['name']}" for row in rows))
        return int(ExitCode.OK)
    columns = [*COLUMNS, *(WIDE if output == "wide" else [])]
    if all_namespaces:
        columns.insert(0, ("namespace", "namespace"))
    if output in ("table", "wide") and not rows:
        where = "" if all_namespaces else " in namespace " + session.client().namespace
        click.echo(f"No DataParallelJobs{where}{' matching ' + selector if selector else ''}.", err=True)
        return int(ExitCode.OK)
    click.echo(render(rows, "table" if output == "wide" else output, lambda data: table(data, columns)))
    return int(ExitCode.OK)


@click.command(short_help="Delete jobs and everything they own.")
@click.argument("jobs", nargs=-1, required=True, shell_complete=complete_jobs)
@connection_options
@click.pass_obj
def delete(session: Session, jobs: tuple[str, ...]) -> int:
    """Delete jobs; their pods, Service and ConfigMaps (the packed script too) go with them."""
    client = session.client()
    for name in jobs:
        client.job(name).delete()
        click.echo(f"{RESOURCE}/{name} deleted")
    return int(ExitCode.OK)


@click.command(short_help="Wait for a job: exit 0 Succeeded, 1 Failed.")
@JOB
@TIMEOUT
@connection_options
@click.pass_obj
def wait(session: Session, job: str, timeout: float | None) -> int:
    """Wait for a job to finish; exit 0 if it Succeeded, 1 with the failure summary if it Failed."""
    handle = session.client().job(job)
    return follow_to_end(handle, follow=False, timeout=timeout)
