"""Shell completion: ``dpjob completion bash|zsh|fish`` and ``kubectl_complete-dpj``.

Both are click's own completion (no other dependency), so commands, flags and choices complete
from the same definitions that parse them, and job names from the cluster (``commands.complete_jobs``,
silent without one).

- ``dpjob completion SHELL`` prints the script click generates for ``dpjob``; the shell then calls
  ``dpjob`` back with ``_DPJOB_COMPLETE=<shell>_complete`` and ``COMP_WORDS``/``COMP_CWORD`` (bash)
  to ask for the candidates.
- ``kubectl_complete-dpj`` serves ``kubectl dpj <TAB>``. kubectl (1.26 and later) runs the executable
  of that name on PATH with the words after ``kubectl dpj``, the last one the word being completed
  (``""`` for a new word), and reads one candidate per line and a last line ``:<directive>``, a
  cobra ShellCompDirective (4: no file completion; 0: the shell may complete file names).
"""

from __future__ import annotations

import click
from click.shell_completion import ShellComplete, get_completion_class

SHELLS = ("bash", "zsh", "fish")
PROG = "dpjob"
COMPLETE_VAR = "_DPJOB_COMPLETE"
# cobra's ShellCompDirective values, as kubectl reads them from a plugin's completion executable.
DIRECTIVE_DEFAULT, DIRECTIVE_NO_FILE, DIRECTIVE_DIRS = 0, 4, 16


@click.command(short_help="Print the shell completion script: bash, zsh or fish.")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> int:
    """Print dpjob's completion script for SHELL; load it in your shell's startup file:

    \b
    bash: eval "$(dpjob completion bash)"      in ~/.bashrc
    zsh:  eval "$(dpjob completion zsh)"       in ~/.zshrc
    fish: dpjob completion fish > ~/.config/fish/completions/dpjob.fish

    Job names complete from the cluster the command line names. For `kubectl dpj <TAB>`, put
    kubectl_complete-dpj (installed with dpjob) on PATH.
    """
    cls = get_completion_class(shell)
    if cls is None:  # click ships all three; a Choice keeps any other name out
        raise click.UsageError(f"no completion for {shell}")
    group = ctx.find_root().command
    click.echo(cls(group, {}, PROG, COMPLETE_VAR).source())
    return 0


def kubectl_completions(group: click.Command, words: list[str]) -> list[str]:
    """The lines ``kubectl_complete-dpj WORDS`` prints: candidates, then ``:<directive>``. Never
    raises: a completion that fails (no cluster, a bad kubeconfig) offers nothing."""
    args, incomplete = words[:-1], (words[-1] if words else "")
    try:
        items = ShellComplete(group, {}, "kubectl dpj", COMPLETE_VAR).get_completions(args, incomplete)
    except Exception:  # noqa: BLE001 - a traceback in the middle of the user's command line helps no one
        items = []
    kinds = {item.type for item in items}
    lines = [f"{item.value}\t{item.help.splitlines()[0]}" if item.help else str(item.value)
             for item in items if item.type == "plain"]
    directive = DIRECTIVE_DEFAULT if "file" in kinds else DIRECTIVE_DIRS if "dir" in kinds else DIRECTIVE_NO_FILE
    return [*lines, f":{directive}"]
