"""The commands on existing jobs and files: explain, logs, status, list, delete, wait.

Each is a thin layer over the SDK (``sdk.Client`` / ``sdk.JobHandle``) plus ``output`` for the
format, so the Python API and the CLI cannot disagree.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.shell_completion import CompletionItem

from dpjob_cli.cmd_run import follow_to_end, interrupted
from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.explain import explain_file
from dpjob_cli.explain_render import render_explanation
from dpjob_cli.output import FORMATS, dump, render, table
from dpjob_cli.sdk import Client
from dpjob_cli.session import Session
from dpjob_cli.status import render_status

OUTPUT = click.option("-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True)
TIMEOUT = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                       help="Give up after this long (exit 8; the job keeps running).")


def complete_jobs(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of JOB: the jobs of the namespace the command line names (silent without a cluster)."""
    params = ctx.find_root().params
    try:
        rows = Client(params.get("namespace"), params.get("kubeconfig"), params.get("context")).list_jobs()
    except CliError:
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
@TIMEOUT
@click.pass_obj
def logs(session: Session, job: str, rank: int | None, all_ranks: bool, follow: bool, timeout: float | None) -> int:
    """Print the trainer logs of a job's ranks."""
    if rank is not None and all_ranks:
        raise click.UsageError("--rank and --all exclude each other")
    handle = session.client().job(job)
    try:
        for line in handle.logs(rank, all_ranks, follow, timeout):
            click.echo(line)
    except KeyboardInterrupt:
        raise interrupted(handle.name, handle.namespace) from None
    return int(ExitCode.OK)


@click.command(short_help="Phase, conditions, per-rank table, progress.")
@JOB
@OUTPUT
@click.pass_obj
def status(session: Session, job: str, output: str) -> int:
    """Phase, conditions, restarts, a per-rank table and training progress when the log has it."""
    click.echo(render(session.client().job(job).status(), output, render_status))
    return int(ExitCode.OK)


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs of every namespace.")
@OUTPUT
@click.pass_obj
def list_jobs(session: Session, all_namespaces: bool, output: str) -> int:
    """List jobs (the columns of `kubectl get dpj`)."""
    rows = session.client().list_jobs(all_namespaces)
    columns = [("name", "name"), ("phase", "phase"), ("ready", "ready"), ("world", "world"),
               ("accelerator", "accelerator"), ("restarts", "restarts"), ("age", "age")]
    if all_namespaces:
        columns.insert(0, ("namespace", "namespace"))
    if output == "table" and not rows:
        click.echo(f"No DataParallelJobs{'' if all_namespaces else ' in namespace ' + session.client().namespace}.",
                   err=True)
        return int(ExitCode.OK)
    click.echo(render(rows, output, lambda data: table(data, columns)))
    return int(ExitCode.OK)


@click.command(short_help="Delete jobs and everything they own.")
@click.argument("jobs", nargs=-1, required=True, shell_complete=complete_jobs)
@click.pass_obj
def delete(session: Session, jobs: tuple[str, ...]) -> int:
    """Delete jobs; their pods, Service and ConfigMaps (the packed script too) go with them."""
    client = session.client()
    for name in jobs:
        client.job(name).delete()
        click.echo(f"dataparalleljob.dpjob.io/{name} deleted")
    return int(ExitCode.OK)


@click.command(short_help="Wait for a job: exit 0 Succeeded, 1 Failed.")
@JOB
@TIMEOUT
@click.pass_obj
def wait(session: Session, job: str, timeout: float | None) -> int:
    """Wait for a job to finish; exit 0 if it Succeeded, 1 with the failure summary if it Failed."""
    handle = session.client().job(job)
    return follow_to_end(handle, follow=False, timeout=timeout)
