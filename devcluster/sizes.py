"""Size limits for every Python folder but tests/: no module over 300 lines, no function over 50.

Long functions are where policies hide inside each other (a 107-line ``plan_job`` held six of them),
so the limit is checked, not hoped for. A function that is a flat table of fields (a dict literal,
one assignment per field, no branches or loops) may carry a ``# sizes: table`` comment on its
``def`` line or on the line above it: splitting a table helps no reader. A marked function that
does branch or loop is reported anyway, so the marker cannot hide logic.

The checked folders are ``DEFAULT_PATHS``: the operator, the CLI, the trainer image, bench/, the
chart's tools, devcluster/ and examples/ (tests/unit/test_sizes_scope.py fails when a tracked Python
file outside tests/ lies in none of them). Tests are left out: a table of cases reads best as one
long list.

Usage: ``python devcluster/sizes.py [PATH ...]`` (default: ``DEFAULT_PATHS``).
Prints ``file:line name length`` per violation; exits 1 if there is any. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("operator/dpjob_operator", "cli/dpjob_cli", "trainer-image/dpjob_trainer", "bench", "helm/tools",
                 "devcluster", "examples")
# Files still over the limits while their split is under way. Each is skipped while it is over and
# reported as stale once it is within the limits (or gone), so that its entry goes with its split.
# Delete the set when it is empty.
BEING_SPLIT: frozenset[str] = frozenset()
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 50
TABLE_MARKER = "# sizes: table"
# Statements that make a function more than a table of fields.
_LOGIC = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.TryStar, ast.With, ast.AsyncWith,
          ast.Match, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

_Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Violation:
    """One thing over its limit, printed as ``file:line name length``."""

    path: str
    line: int
    name: str
    length: int
    limit: int
    note: str = ""

    def __str__(self) -> str:
        note = f"; {self.note}" if self.note else ""
        return f"{self.path}:{self.line} {self.name} {self.length} lines (limit {self.limit}{note})"


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, _Function]]:
    """Every function and method under ``node``, with a dotted name (``Class.method``, ``outer.inner``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _functions(child, f"{name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _is_marked_table(function: _Function, lines: list[str]) -> bool:
    """The marker sits on the ``def`` line or on the line just above the function (or its decorators)."""
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    candidates = [lines[function.lineno - 1]]
    if first >= 2:
        candidates.append(lines[first - 2])
    return any(TABLE_MARKER in line for line in candidates)


def _has_logic(function: _Function) -> bool:
    return any(isinstance(node, _LOGIC) for stmt in function.body for node in ast.walk(stmt))


def check_file(path: Path, shown_as: str) -> list[Violation]:
    """The violations in one Python file."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: list[Violation] = []
    if len(lines) > MAX_MODULE_LINES:
        found.append(Violation(shown_as, 1, "<module>", len(lines), MAX_MODULE_LINES))
    for name, function in _functions(ast.parse(source, filename=str(path))):
        length = (function.end_lineno or function.lineno) - function.lineno + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        if not _is_marked_table(function, lines):
            found.append(Violation(shown_as, function.lineno, name, length, MAX_FUNCTION_LINES))
        elif _has_logic(function):
            note = f"marked '{TABLE_MARKER}' but branches or loops: only flat field tables are exempt"
            found.append(Violation(shown_as, function.lineno, name, length, MAX_FUNCTION_LINES, note))
    return found


def python_files(paths: list[Path]) -> Iterator[Path]:
    """The ``.py`` files under each path (a file counts as itself); paths that do not exist are skipped."""
    for path in paths:
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _repo_path(path: Path) -> str:
    """``path`` relative to the repository root, as ``BEING_SPLIT`` names it ("" outside the repository)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return ""


def _split_pending(files: list[Path], defaults: bool) -> tuple[list[Violation], list[str]]:
    """The violations outside ``BEING_SPLIT``, and the entries of ``BEING_SPLIT`` no longer needed:
    a checked file within the limits, or (when checking the defaults) a file that is gone."""
    violations: list[Violation] = []
    still_over: set[str] = set()
    checked: set[str] = set()
    for file in files:
        found = check_file(file, _shown(file))
        key = _repo_path(file)
        checked.add(key)
        if key not in BEING_SPLIT:
            violations.extend(found)
        elif found:
            still_over.add(key)
    stale = sorted(entry for entry in BEING_SPLIT
                   if entry not in still_over and (defaults or entry in checked))
    return violations, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("paths", nargs="*", type=Path,
                        help=f"files or directories (default: {' '.join(DEFAULT_PATHS)})")
    args = parser.parse_args(argv)
    paths: list[Path] = args.paths or [ROOT / p for p in DEFAULT_PATHS]
    violations, stale = _split_pending(list(python_files(paths)), defaults=not args.paths)
    for violation in violations:
        print(violation)
    for entry in stale:
        print(f"{entry} BEING_SPLIT: within the limits (or gone): delete its entry in devcluster/sizes.py")
    if violations:
        print(f"sizes: {len(violations)} over the limits (module {MAX_MODULE_LINES} lines, function "
              f"{MAX_FUNCTION_LINES}): split them by policy; a flat field table may say '{TABLE_MARKER}'",
              file=sys.stderr)
    return 1 if violations or stale else 0


if __name__ == "__main__":
    sys.exit(main())
