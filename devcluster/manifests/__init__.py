"""The dev cluster's configuration files, kept as YAML beside this module and read or rendered here.

Templated files use ``string.Template`` placeholders (``${name}``); ``render`` fails on a missing
value rather than writing a half-filled file. The kwok stages hold Go templates (``{{ $now }}``) for
kwok itself, so they are read as they are, never rendered. Standard library only.
"""

from __future__ import annotations

import string
from pathlib import Path

DIR = Path(__file__).resolve().parent


def text(name: str) -> str:
    """A file's content as written (``kwok-sim-stages.yaml``, ``audit-policy.yaml``)."""
    return (DIR / name).read_text()


def render(name: str, **values: object) -> str:
    """A template with every ``${placeholder}`` replaced by ``values`` (KeyError if one is missing)."""
    return string.Template(text(name)).substitute({k: str(v) for k, v in values.items()})
