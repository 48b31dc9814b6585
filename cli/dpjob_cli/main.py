"""Entry point of ``dpjob`` and of the kubectl plugin ``kubectl-dpj`` (``kubectl dpj ...``).

Why click: it generates ``--help`` for every command from the code, gives bash/zsh/fish completion
(``dpjob completion bash``, ``completion.py``), and reports usage errors as one line with exit code 2,
which is what the CLI promises for every other failure too. Commands live in ``commands`` and
``cmd_run``; this module owns the global options and turns every failure into one line on stderr
and its documented exit code (docs/cli.md), never a traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from dpjob_cli.cmd_run import run
from dpjob_cli.commands import delete, describe, explain, list_jobs, logs, status, wait
from dpjob_cli.completion import completion, kubectl_completions
from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.session import Session

EXIT_CODES = """\b
Exit codes: 0 ok / job Succeeded, 1 job Failed, 2 usage, 3 no cluster access,
4 CRD not installed, 5 unknown job, 6 invalid spec, 7 bad local file
(missing, too big), 8 timeout, 9 other API error, 70 internal error,
130 interrupted (the job keeps running)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODES)
@click.option("--kubeconfig", envvar="DPJOB_KUBECONFIG", metavar="PATH",
              help="kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config).")
@click.option("--context", metavar="NAME", help="kubeconfig context (default: its current context).")
@click.option("-n", "--namespace", metavar="NS", help="namespace (default: the context's, else 'default').")
@click.version_option(package_name="dpjob", prog_name="dpjob")
@click.pass_context
def cli(ctx: click.Context, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
    """Run data-parallel training jobs (DataParallelJob, dpjob.io) from a script, and follow them.

    \b
    dpjob run train.py --replicas 2 --follow     pack, submit, stream every rank, exit with the result
    dpjob explain -f job.yaml                    validate and show the pods, env, rank table, fit
    dpjob logs JOB [--rank N | --all] [-f] [-p]  rank logs, merged with [rank N] prefixes
    dpjob status JOB | describe JOB | list [-l SELECTOR] | delete JOB | wait JOB
    dpjob completion bash|zsh|fish               shell completion (kubectl dpj: kubectl_complete-dpj)

    -n/--namespace, --context and --kubeconfig work before the command and after it.
    """
    ctx.obj = Session(kubeconfig=kubeconfig, context=context, namespace=namespace)


for command in (run, explain, logs, status, describe, list_jobs, delete, wait, completion):
    cli.add_command(command)


def _prog_name(argv0: str) -> str:
    """``kubectl dpj`` when run as the kubectl plugin, so help and hints show what the user typed."""
    return "kubectl dpj" if Path(argv0).name.startswith("kubectl-dpj") else "dpjob"


def _error(lines: list[str]) -> None:
    for line in lines:
        click.echo(f"error: {line}", err=True)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (console scripts call ``sys.exit`` with it)."""
    try:
        result = cli.main(args=argv, prog_name=_prog_name(sys.argv[0]), standalone_mode=False)
    except CliError as exc:
        _error(exc.lines())
        return int(exc.code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        if os.environ.get("DPJOB_DEBUG"):
            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        _error([f"unexpected {type(exc).__name__}: {first} (DPJOB_DEBUG=1 shows the traceback)"])
        return int(ExitCode.INTERNAL)
    return int(result) if isinstance(result, int) else 0


def entry() -> None:
    """Console-script entry point: ``dpjob`` and ``kubectl-dpj``."""
    sys.exit(main())


def kubectl_complete_entry() -> None:
    """Console-script entry point ``kubectl_complete-dpj``: what ``kubectl dpj <TAB>`` offers."""
    click.echo("\n".join(kubectl_completions(cli, sys.argv[1:])))


if __name__ == "__main__":
    entry()
