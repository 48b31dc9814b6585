"""Options that several commands share: the connection flags, ``-o`` and ``--timeout``.

The connection flags (``-n``, ``--context``, ``--kubeconfig``) are accepted before the command and
after it, as kubectl accepts them (``dpjob logs JOB -n NS``). The ones after the command are parsed
later, so they win. They land on the ``Session`` the group made (``ctx.meta`` too, which shell
completion reads: it parses without running the group).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from dpjob_cli.session import Session

F = TypeVar("F", bound=Callable[..., Any])
CONNECTION = (("kubeconfig", ("--kubeconfig",), "PATH",
               "kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config)."),
              ("context", ("--context",), "NAME", "kubeconfig context (default: its current context)."),
              ("namespace", ("-n", "--namespace"), "NS", "namespace (default: the context's, else 'default')."))
META_KEY = "dpjob.connection"
GET_FORMATS = ("table", "wide", "name", "json", "yaml")

TIMEOUT = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                       help="Give up after this long (exit 8; the job keeps running).")
GET_OUTPUT = click.option("-o", "--output", type=click.Choice(GET_FORMATS), default="table", show_default=True,
                          help="table, wide (more columns), name, json or yaml.")


def connection_value(ctx: click.Context, key: str) -> str | None:
    """A connection flag as the command line gave it, after the command or before it."""
    given: dict[str, str] = ctx.meta.get(META_KEY, {})
    value = given.get(key) or ctx.find_root().params.get(key)
    return str(value) if value else None


def _remember(key: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is None:
            return
        ctx.meta.setdefault(META_KEY, {})[key] = value
        session = ctx.find_object(Session)
        if session is not None:
            setattr(session, key, value)
    return callback


def connection_options(command: F) -> F:
    """Add -n/--namespace, --context and --kubeconfig to a command (they are also the group's)."""
    for key, flags, metavar, help_text in reversed(CONNECTION):
        command = click.option(*flags, key, metavar=metavar, expose_value=False, is_eager=True,
                               callback=_remember(key), help=help_text)(command)
    return command
