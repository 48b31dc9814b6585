"""The commands the documentation shows work. A fenced block marked ```` ```bash offline ```` in
README.md or docs/ runs here, from the repository root, with `dpjob` on PATH and no cluster, and
must exit 0. Every other `dpjob ...` or `kubectl dpj ...` command in a code block or code span
names a command and flags the CLI has: a renamed flag breaks this test, not a reader's paste."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from markdown_it import MarkdownIt

from dpjob_cli.main import cli as group
from tests.support.paths import REPO

pytestmark = pytest.mark.unit

PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
SHELL_INFO = {"", "bash", "sh", "shell", "console"}
# Where a new shell command starts: a pipe, a list operator, a subshell, a command substitution.
COMMAND_START = re.compile(r"&&|\|\||[;|(`]|\$\(")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")


def code(page: Path) -> Iterator[tuple[str, str]]:
    """(info string, text) of every fenced block and code span of a page."""
    stack = MarkdownIt("commonmark").parse(page.read_text())
    while stack:
        token = stack.pop(0)
        if token.type in ("fence", "code_block"):
            yield token.info.strip(), token.content
        elif token.type == "code_inline":
            yield "", token.content
        stack[:0] = token.children or []


def offline_blocks() -> list[tuple[str, str]]:
    return [(f"{page.relative_to(REPO)}:{i}", text) for page in PAGES
            for i, (info, text) in enumerate(code(page)) if info.split() == ["bash", "offline"]]


def cli_commands() -> list[tuple[str, list[str]]]:
    """(page, the words after `dpjob`) of every dpjob or kubectl dpj command in the docs' shell code."""
    found = []
    for page in PAGES:
        for info, text in code(page):
            if info.split()[:1] and info.split()[0] not in SHELL_INFO:
                continue
            for line in text.splitlines():
                if info == "console" and not line.startswith("$ "):
                    continue  # output, not a command
                line = re.sub(r"^\$ ", "", line.split(" # ")[0].strip())
                line = re.sub(r"\[[^]]*\]", lambda m: m.group(0).replace("|", " "), line)  # [--rank N | --all]
                for part in COMMAND_START.split(line):
                    words = words_of(part)
                    while words and ENV_ASSIGNMENT.match(words[0]):
                        words = words[1:]
                    if words[:1] == ["dpjob"]:
                        found.append((str(page.relative_to(REPO)), words[1:]))
                    elif words[:2] == ["kubectl", "dpj"]:
                        found.append((str(page.relative_to(REPO)), words[2:]))
    return found


def words_of(part: str) -> list[str]:
    """Shell words, with the synopsis brackets and bars of `[--rank N | --all]` taken off."""
    try:
        words = shlex.split(part)
    except ValueError:
        words = part.split()
    words = words[:1] + [w.strip("[]\"')") for w in words[1:]]  # `[dpjob] ...` output is no command
    return [w for w in words if w and w != "|"]


def options(command: click.Command) -> set[str]:
    return {opt for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}


def takes_value(command: click.Command, flag: str) -> bool:
    return any(isinstance(p, click.Option) and flag in p.opts and not p.is_flag for p in command.params)


def problems(words: list[str]) -> list[str]:
    """What in ``dpjob WORDS`` the CLI does not have: an unknown command, an unknown flag."""
    given = list(words)
    while given and given[0].startswith("-"):
        flag = given.pop(0).split("=")[0]
        if flag not in options(group) | {"--help"}:
            return [f"no global option {flag}"]
        if takes_value(group, flag) and "=" not in flag and given:
            given.pop(0)
    if not given or given[0] in ("...", "COMMAND", "<TAB>"):
        return []
    name, rest = given[0], given[1:]
    command = group.commands.get(name)
    if command is None:
        return [f"no command {name!r}"]
    passes_unknown = bool(command.context_settings.get("ignore_unknown_options"))
    positional_seen, out = False, []
    for word in rest:
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            positional_seen = True
            continue
        flag = word.split("=")[0]
        if flag not in options(command) | {"--help", "-h"} and not (passes_unknown and positional_seen):
            out.append(f"{name} has no option {flag}")
    return out


def test_the_docs_show_cli_commands_to_check():
    """The extraction finds the commands a reader sees (this test would pass vacuously otherwise)."""
    names = {words[0] for _, words in cli_commands() if words and not words[0].startswith("-")}
    assert {"run", "explain", "logs", "status", "describe", "list", "delete", "wait"} <= names
    assert len(cli_commands()) >= 20


@pytest.mark.parametrize("page, words", cli_commands(), ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_every_documented_command_names_a_real_command_and_real_flags(page, words):
    assert not problems(words), f"{page}: `dpjob {' '.join(words)}`: {problems(words)}"


@pytest.mark.parametrize("words, problem", [
    (["lgs", "JOB"], "no command 'lgs'"),
    (["logs", "JOB", "--tial", "10"], "logs has no option --tial"),
    (["--namespce", "x", "list"], "no global option --namespce"),
    (["run", "--replicaz", "2", "train.py"], "run has no option --replicaz"),
])
def test_the_check_refuses_a_command_the_cli_does_not_have(words, problem):
    assert problems(words) == [problem]


def test_the_check_passes_the_scripts_own_flags_of_run():
    assert problems(["run", "train.py", "-r", "2", "--epochs", "3", "--", "--name", "x"]) == []


def test_there_are_offline_blocks_to_run():
    assert len(offline_blocks()) >= 2


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory) -> dict[str, str]:
    """`dpjob` on PATH as this checkout's source; a kubeconfig that does not exist, so nothing in an
    offline block can reach a cluster."""
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "dpjob"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dpjob_cli "$@"\n')
    shim.chmod(0o755)
    source = os.pathsep.join(str(REPO / p) for p in ("cli", "operator", "trainer-image", "."))
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": source,
            "KUBECONFIG": str(bin_dir / "no-kubeconfig"), "DPJOB_KUBECONFIG": str(bin_dir / "no-kubeconfig")}


@pytest.mark.parametrize("where, block", offline_blocks(), ids=[w for w, _ in offline_blocks()])
def test_offline_blocks_run_as_written(shell_env, where, block):
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=REPO, env=shell_env, capture_output=True,
                          text=True, timeout=60)
    output = proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{block}\n{output}"
