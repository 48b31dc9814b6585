"""The dpjob command line without a cluster: usage errors, local input, dry run, Ctrl-C, the
plugin's name. What a user sees: one line on stderr, the documented exit code, never a traceback.
Everything that talks to the API server is tested against the real control plane:
tests/integration/test_cli_integration.py and tests/e2e/test_cli_e2e.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from dpjob_cli.cmd_run import follow_to_end
from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.main import main

pytestmark = pytest.mark.unit


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


class _Interrupted:
    name, namespace = "hello", "team-a"

    def logs(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        yield "[rank 0] step 1"
        raise KeyboardInterrupt


def test_ctrl_c_while_following_leaves_the_job_and_says_how_to_reattach(capsys):
    with pytest.raises(CliError) as err:
        follow_to_end(_Interrupted(), follow=True, timeout=None)  # type: ignore[arg-type]
    assert err.value.code == ExitCode.INTERRUPTED == 130
    assert "job hello keeps running" in err.value.message
    assert "dpjob logs hello -n team-a --all -f" in err.value.message


@pytest.mark.parametrize("argv, code, text", [
    (["run"], ExitCode.USAGE, "Missing argument 'SCRIPT'"),
    (["run", "t.py", "-r", "0"], ExitCode.USAGE, "0 is not in the range"),
    (["logs", "x", "--rank", "1", "--all"], ExitCode.USAGE, "--rank and --all exclude each other"),
    (["run", "missing.py"], ExitCode.BAD_INPUT, "error: no such script: missing.py"),
])
def test_usage_and_local_input_errors(capsys, argv, code, text):
    exit_code, _, err = cli(capsys, *argv)
    assert exit_code == code and text in err and "Traceback" not in err


def test_run_dry_run_prints_the_job_and_configmap_without_a_cluster(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    (tmp_path / "train.py").write_text("print('hi')\n")
    code, out, _ = cli(capsys, "run", str(tmp_path / "train.py"), "--lr", "0.1", "--dry-run")
    job, cm = yaml.safe_load_all(out)
    assert code == ExitCode.OK and job["kind"] == "DataParallelJob" and cm["kind"] == "ConfigMap"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == ["--lr", "0.1"]


def test_the_kubectl_plugin_names_itself_kubectl_dpj(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["/usr/local/bin/kubectl-dpj", "--help"])
    code, out, _ = cli(capsys, "--help")
    assert code == ExitCode.OK and out.startswith("Usage: kubectl dpj [OPTIONS] COMMAND")
    for command in ("run", "explain", "logs", "status", "list", "delete", "wait"):
        assert re.search(rf"^  {command}\s", out, re.M), command
