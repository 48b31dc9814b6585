"""A script (or a small directory) -> the files of a ConfigMap, checked against the ConfigMap limit.

Pure apart from reading the files. ConfigMap keys cannot hold ``/``, so every file gets a flat key
and the volume's ``items`` put it back at its relative path under the mount. The API server refuses
a ConfigMap whose data and binaryData together exceed 1 MiB; checking here turns that late, vague
refusal into one line that says how big the input is and what to do instead.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path

from dpjob_cli.errors import CliError, ExitCode

CONFIGMAP_LIMIT = 1024 * 1024  # bytes of data + binaryData the API server accepts (MaxConfigMapSize)
REQUIREMENTS_PATH = "_dpjob/requirements.txt"  # inside the mount; "_" keeps it clear of user packages
SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".venv", "venv", "node_modules", ".mypy_cache",
                          ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")
_KEY_UNSAFE = re.compile(r"[^-._a-zA-Z0-9]")
_MAX_KEY = 253


@dataclass(frozen=True)
class Packed:
    """Files for the ConfigMap and how the volume lays them out again."""

    entry: str  # the script's path relative to the mount, e.g. "train.py" or "pkg/train.py"
    data: dict[str, str] = field(default_factory=dict)  # key -> UTF-8 text
    binary_data: dict[str, str] = field(default_factory=dict)  # key -> base64
    items: tuple[tuple[str, str], ...] = ()  # (key, relative path) for the volume's items
    requirements: str | None = None  # relative path of the pip requirements file, if any
    size: int = 0  # bytes counted against CONFIGMAP_LIMIT


def human_size(size: int) -> str:
    """1 MiB, 1.05 MiB, 12 KiB, 300 B: exact where round, two decimals otherwise."""
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale:
            return f"{size // scale} {unit}" if size % scale == 0 else f"{size / scale:.2f} {unit}"
    return f"{size} B"


def _files_of(directory: Path) -> list[Path]:
    """Regular files under ``directory`` in a stable order; caches and hidden files (.env, .git) stay home."""
    files = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).parts
        if any(part in SKIPPED_DIRS or part.startswith(".") for part in rel):
            continue
        if path.is_file() and not path.name.endswith(SKIPPED_SUFFIXES):
            files.append(path)
    return files


def config_key(rel_path: str, taken: set[str]) -> str:
    """A ConfigMap key for ``rel_path`` (``[-._a-zA-Z0-9]``, at most 253 characters), unique in ``taken``."""
    base = _KEY_UNSAFE.sub("_", rel_path.replace("/", "__"))[:_MAX_KEY - 4] or "file"
    key, n = base, 1
    while key in taken:
        key, n = f"{base}-{n}", n + 1
    taken.add(key)
    return key


def _add(files: list[tuple[str, bytes]], data: dict[str, str], binary: dict[str, str],
         items: list[tuple[str, str]]) -> int:
    taken: set[str] = set()
    size = 0
    for rel, content in files:
        key = config_key(rel, taken)
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(content).decode()
        size += len(content)
        items.append((key, rel))
    return size


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(ExitCode.BAD_INPUT, f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _sources(script: Path, directory: Path | None) -> tuple[str, list[tuple[str, bytes]]]:
    """(entry, [(relative path, bytes)]) of a single script or of a whole directory."""
    if directory is None:
        return script.name, [(script.name, _read(script, "script"))]
    if not directory.is_dir():
        raise CliError(ExitCode.BAD_INPUT, f"no such directory: {directory}")
    try:
        entry = script.resolve().relative_to(directory.resolve()).as_posix()
    except ValueError:
        raise CliError(ExitCode.BAD_INPUT, f"the script {script} is not inside --dir {directory}") from None
    return entry, [(p.relative_to(directory).as_posix(), _read(p, "file")) for p in _files_of(directory)]


def pack(script: Path, directory: Path | None = None, requirements: Path | None = None,
         limit: int = CONFIGMAP_LIMIT) -> Packed:
    """Read the script (or ``directory``, which must contain it) and ``requirements`` into a ``Packed``.

    Raises ``CliError(BAD_INPUT)`` for a missing file and for input over ``limit`` bytes.
    """
    if not script.is_file():
        raise CliError(ExitCode.BAD_INPUT, f"no such script: {script}" if not script.exists()
                       else f"not a file: {script} (pass a script; --dir packs the folder around it)")
    if requirements is not None and not requirements.is_file():
        raise CliError(ExitCode.BAD_INPUT, f"no such requirements file: {requirements}")
    entry, files = _sources(script, directory)
    if requirements is not None:
        files.append((REQUIREMENTS_PATH, _read(requirements, "requirements file")))
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    items: list[tuple[str, str]] = []
    size = _add(files, data, binary, items)
    if size > limit:
        what = f"--dir {directory} ({len(files)} files)" if directory is not None else f"the script {script}"
        raise CliError(ExitCode.BAD_INPUT,
                       f"{what} is {human_size(size)}, over the {human_size(limit)} a ConfigMap can hold: "
                       "build an image that contains your code and run it with --image IMG --in-image")
    return Packed(entry=entry, data=data, binary_data=binary, items=tuple(items),
                  requirements=REQUIREMENTS_PATH if requirements is not None else None, size=size)
