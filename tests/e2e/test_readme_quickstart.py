"""The README's quick start, followed literally on the dev cluster: its shell line for PATH and
KUBECONFIG, then its job's commands (`kubectl create namespace`, `kubectl apply -f
examples/...`), run as written from the repository root with only the namespace renamed for the
test; the job must reach Succeeded in containers, with the files the README names present."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from tests.support import cluster as dpj
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e
README = REPO / "README.md"


def bash_blocks() -> list[list[str]]:
    return [[line for line in block.splitlines() if line.strip()]
            for block in re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)]


def readme_environment() -> dict[str, str]:
    """The README's `export KUBECONFIG=... PATH=...` line, evaluated from the repository root."""
    [line] = [ln for block in bash_blocks() for ln in block if ln.startswith("export KUBECONFIG=")]
    out = subprocess.run(["bash", "-c", f"{line.split('#')[0]}; env -0"], cwd=REPO, capture_output=True,
                         text=True, check=True)
    return dict(item.split("=", 1) for item in out.stdout.split("\0") if "=" in item)


def the_jobs_commands() -> list[str]:
    [block] = [b for b in bash_blocks() if any("kubectl apply" in ln for ln in b)]
    return [ln for ln in block if not ln.rstrip().endswith("-w")]  # the watch is for a person


def test_the_readme_quick_start_trains_the_quickstart_job(api, namespace, operator_pod):
    env = readme_environment()
    commands = the_jobs_commands()
    assert any("examples/quickstart-cpu.yaml" in c for c in commands), commands
    for command in commands:
        argv = shlex.split(command)
        for i, word in enumerate(argv):
            if (REPO / word).suffix == ".yaml":
                assert (REPO / word).is_file(), f"the README names {word}, which the repository lacks"
            if i and argv[i - 1] in ("-n", "namespace"):
                argv[i] = namespace  # `demo` in the README: the test's own namespace
        if argv[:3] == ["kubectl", "create", "namespace"]:
            continue  # the namespace fixture made it
        out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{command}: {out.stderr}"
    st = dpj.wait_phase(api, namespace, "quickstart", "Succeeded", timeout=300)
    assert st["succeededReplicas"] == 2 and st["restarts"] == 0, st
