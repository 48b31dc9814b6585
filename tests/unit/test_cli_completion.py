"""Shell completion as a shell uses it: `dpjob completion bash` sourced in a real bash, which asks
`dpjob` for candidates through click's protocol (COMP_WORDS, COMP_CWORD, _DPJOB_COMPLETE), and
`kubectl_complete-dpj` answering as kubectl asks for `kubectl dpj <TAB>` (the words after
`kubectl dpj`, candidates one per line, then `:<cobra directive>`). No cluster: job names then
complete to nothing, silently; with a cluster (a fake Client) they are the namespace's jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dpjob_cli.completion import kubectl_completions
from dpjob_cli.main import cli
from tests.support.paths import REPO

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    """`dpjob` and `kubectl_complete-dpj` on PATH as the console scripts pyproject.toml declares."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    out = tmp_path_factory.mktemp("bin")
    for name in ("dpjob", "kubectl_complete-dpj"):
        module, func = scripts[name].split(":")
        (out / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "import {module}; {module}.{func}()" "$@"\n')
        (out / name).chmod(0o755)
    return out


@pytest.fixture(scope="module")
def env(bin_dir, tmp_path_factory) -> dict[str, str]:
    source = os.pathsep.join(str(REPO / p) for p in ("cli", "operator", "."))
    missing = str(tmp_path_factory.mktemp("home") / "no-kubeconfig")  # no cluster: job names complete to nothing
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": source,
            "KUBECONFIG": missing, "DPJOB_KUBECONFIG": missing}


def bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def complete_in_bash(words: list[str], env: dict[str, str]) -> tuple[list[str], str]:
    """Source `dpjob completion bash`, put the words on bash's command line, press TAB (call the
    function `complete -F` registered), return COMPREPLY and stderr."""
    quoted = " ".join(f"'{w}'" for w in words)
    script = f"""
        eval "$(dpjob completion bash)"
        complete -p dpjob >/dev/null
        COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}
        _dpjob_completion dpjob
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    proc = bash(script, env)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line], proc.stderr


@pytest.mark.parametrize("words, expected", [
    (["dpjob", "de"], ["delete", "describe"]),
    (["dpjob", "logs", "--ra"], ["--rank"]),
    (["dpjob", "logs", "--t"], ["--tail", "--timestamps", "--timeout"]),
    (["dpjob", "run", "train.py", "--accelerator", "g"], ["gpu"]),
    (["dpjob", "completion", ""], ["bash", "zsh", "fish"]),
])
def test_bash_completes_commands_flags_and_choices(env, words, expected):
    assert complete_in_bash(words, env)[0] == expected


def test_bash_completes_job_names_to_nothing_and_quietly_without_a_cluster(env):
    assert complete_in_bash(["dpjob", "logs", ""], env) == ([], "")


def test_the_click_protocol_answers_a_shell_that_speaks_it_directly(env):
    proc = subprocess.run(["dpjob"], env={**env, "COMP_WORDS": "dpjob -n team-a st", "COMP_CWORD": "3",
                                          "_DPJOB_COMPLETE": "bash_complete"}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["plain,status"], proc.stdout + proc.stderr


@pytest.mark.parametrize("shell, marker", [("zsh", "_DPJOB_COMPLETE=zsh_complete"),
                                           ("fish", "_DPJOB_COMPLETE=fish_complete")])
def test_zsh_and_fish_get_clicks_script_for_dpjob(env, shell, marker):
    proc = bash(f"dpjob completion {shell}", env)
    assert proc.returncode == 0 and marker in proc.stdout, proc.stdout + proc.stderr


def test_an_unknown_shell_is_a_usage_error(env):
    proc = bash("dpjob completion powershell", env)
    assert proc.returncode == 2 and "powershell" in proc.stderr


@pytest.mark.parametrize("words, lines", [
    (["lo"], ["logs\tPrint the trainer logs of a job's ranks.", ":4"]),
    (["logs", "train", "--al"], ["--all\tEvery rank, each line prefixed [rank N].", ":4"]),
    (["logs", "train", "--si"], ["--since\tOnly lines newer than this: 5s, 2m, 1h, 1h30m.", ":4"]),
    (["logs", ""], [":4"]),  # job names: none without a cluster, and no file names either
    (["explain", "-f", ""], [":0"]),  # a path: kubectl lets the shell complete file names
])
def test_kubectl_complete_dpj_answers_kubectl_plugin_completion(env, words, lines):
    proc = subprocess.run(["kubectl_complete-dpj", *words], env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.splitlines(), proc.stderr) == (0, lines, "")


class JobsClient:
    """A cluster with two jobs in team-a; records the namespace it was asked for."""

    namespaces: ClassVar[list[str | None]] = []

    def __init__(self, namespace: str | None = None, kubeconfig: str | None = None,
                 context: str | None = None) -> None:
        JobsClient.namespaces.append(namespace)

    def list_jobs(self) -> list[dict[str, Any]]:
        return [{"name": "resnet"}, {"name": "bert"}]


def test_job_names_come_from_the_namespace_the_command_line_names(monkeypatch):
    JobsClient.namespaces = []
    monkeypatch.setattr("dpjob_cli.commands.Client", JobsClient)
    assert kubectl_completions(cli, ["logs", "-n", "team-a", "r"]) == ["resnet", ":4"]
    assert kubectl_completions(cli, ["describe", ""]) == ["resnet", "bert", ":4"]
    assert JobsClient.namespaces == ["team-a", None]


def test_a_failing_cluster_offers_nothing_instead_of_a_traceback(monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("connection refused")

    monkeypatch.setattr("dpjob_cli.commands.Client", broken)
    assert kubectl_completions(cli, ["status", ""]) == [":4"]
