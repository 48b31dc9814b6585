"""Size limits for the operator and the CLI: no module over 300 lines, no function over 50.

Long functions are where policies hide inside each other (a 107-line ``plan_job`` held six of them),
so the limit is checked, not hoped for. A function that is a flat table of fields (a dict literal,
one assignment per field, no branches or loops) may carry a ``# sizes: table`` comment on its
``def`` line or on the line above it: splitting a table helps no reader. A marked function that
does branch or loop is reported anyway, so the marker cannot hide logic.

Usage: ``python devcluster/sizes.py [PATH ...]`` (default: the operator's and the CLI's packages).
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
DEFAULT_PATHS = ("operator/dpjob_operator", "cli/dpjob_cli")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("paths", nargs="*", type=Path,
                        help=f"files or directories (default: {' '.join(DEFAULT_PATHS)})")
    args = parser.parse_args(argv)
    paths: list[Path] = args.paths or [ROOT / p for p in DEFAULT_PATHS]
    violations = [v for f in python_files(paths) for v in check_file(f, _shown(f))]
    for violation in violations:
        print(violation)
    if violations:
        print(f"sizes: {len(violations)} over the limits (module {MAX_MODULE_LINES} lines, function "
              f"{MAX_FUNCTION_LINES}): split them by policy; a flat field table may say '{TABLE_MARKER}'",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
