"""What devcluster/sizes.py checks by default: every Python folder but tests/, and nothing hidden
for longer than a split takes (its ``BEING_SPLIT`` entries)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from devcluster import sizes

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _too_long(name: str) -> str:
    return f"def {name}() -> None:\n" + "    x = 1\n" * 60


def test_every_tracked_python_file_outside_tests_is_checked() -> None:
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "--", "*.py"], capture_output=True, text=True,
                             check=True).stdout.split()
    outside_tests = [path for path in tracked if not path.startswith("tests/")]
    assert outside_tests, "git lists no Python file: not a checkout?"
    unchecked = [path for path in outside_tests
                 if not any(path == folder or path.startswith(f"{folder}/") for folder in sizes.DEFAULT_PATHS)]
    assert unchecked == [], f"add their folders to DEFAULT_PATHS in devcluster/sizes.py: {unchecked}"


def test_every_entry_being_split_names_a_file_still_over_the_limits() -> None:
    for entry in sorted(sizes.BEING_SPLIT):
        path = REPO / entry
        assert path.is_file(), f"{entry}: gone, delete its BEING_SPLIT entry"
        assert sizes.check_file(path, entry), f"{entry}: within the limits, delete its BEING_SPLIT entry"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository root in tmp_path holding pkg/, with pkg/big.py and pkg/small.py being split."""
    (tmp_path / "pkg").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sizes, "ROOT", tmp_path)
    monkeypatch.setattr(sizes, "DEFAULT_PATHS", ("pkg",))
    monkeypatch.setattr(sizes, "BEING_SPLIT", frozenset({"pkg/big.py", "pkg/small.py"}))
    return tmp_path


def test_a_file_being_split_is_skipped_while_it_is_over(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "pkg" / "big.py").write_text(_too_long("everything"))
    (tree / "pkg" / "small.py").write_text(_too_long("everything"))
    assert sizes.main([]) == 0
    assert capsys.readouterr().out == ""
    (tree / "pkg" / "other.py").write_text(_too_long("unlisted"))
    assert sizes.main([]) == 1
    assert capsys.readouterr().out.splitlines() == ["pkg/other.py:1 unlisted 61 lines (limit 50)"]


def test_an_entry_within_the_limits_or_gone_must_be_deleted(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "pkg" / "big.py").write_text(_too_long("everything"))
    (tree / "pkg" / "small.py").write_text("x = 1\n")
    assert sizes.main([]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "pkg/small.py BEING_SPLIT: within the limits (or gone): delete its entry in devcluster/sizes.py"]
    (tree / "pkg" / "small.py").unlink()
    assert sizes.main([]) == 1, "a file that is gone is stale too"
    assert "pkg/small.py BEING_SPLIT" in capsys.readouterr().out
    assert sizes.main(["pkg/big.py"]) == 0, "checking named paths judges only the entries among them"
