"""examples/train.py, the script the README's quick start runs: it compiles, it is plain torch (no
dpjob import, so a reader can take it anywhere), its parser takes `--epochs`, and `dpjob run` packs
it as the quick start says. Nothing here starts a process group: a real DDP run is the e2e tests'."""

from __future__ import annotations

import ast
import importlib.util
import py_compile
import subprocess
import sys

import pytest
import yaml

from dpjob_cli.main import main
from tests.support.paths import EXAMPLES, REPO

pytestmark = pytest.mark.unit

SCRIPT = EXAMPLES / "train.py"


def test_the_script_compiles(tmp_path):
    py_compile.compile(str(SCRIPT), cfile=str(tmp_path / "train.pyc"), doraise=True)


def test_the_script_is_plain_torch_and_short():
    tree = ast.parse(SCRIPT.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name for name in imported if name.startswith("dpjob")}, imported
    assert "torch" in imported
    assert len(SCRIPT.read_text().splitlines()) <= 80


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed in this venv")
def test_its_parser_takes_epochs():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--epochs", "2", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--epochs" in proc.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "--epochs", "many"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--epochs" in bad.stderr  # argparse's usage error, before any process group


def test_the_readme_runs_it_and_dpjob_run_packs_it(capsys, monkeypatch):
    assert "dpjob run examples/train.py" in (REPO / "README.md").read_text()
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    assert main(["run", str(SCRIPT), "--replicas", "2", "--dry-run", "--", "--epochs", "3"]) == 0
    job, configmap = yaml.safe_load_all(capsys.readouterr().out)
    assert job["spec"]["replicas"] == 2
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "/dpjob/src/train.py",
                                                                          "--epochs", "3"]
    assert configmap["data"]["train.py"] == SCRIPT.read_text()
