"""The gate of the MindSpore tests: they need the MindSpore venv, not the main (torch) one.

mindspore 2.10 pins numpy 1.x and cannot share the main venv (numpy 2), so these tests run with
``~/.cache/dpjob/venv-ms-*/bin/python -m pytest -m mindspore``. Without mindspore a developer's run
skips them; under ``CI=true`` a missing mindspore is a failure with one line, so CI can never go
green by silently skipping the only checks of the MindSpore backend.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest

MISSING = ("mindspore is not importable in this venv: run `make venv-mindspore` and run these tests with "
           "~/.cache/dpjob/venv-ms-*/bin/python -m pytest -m mindspore")


@functools.cache
def mindspore_available() -> bool:
    """find_spec, not import: deciding must not cost the multi-second mindspore import."""
    return importlib.util.find_spec("mindspore") is not None


def require_mindspore() -> None:
    """Skip (developer) or fail (``CI=true``) the calling test when mindspore is missing."""
    if mindspore_available():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(MISSING, pytrace=False)
    pytest.importorskip("mindspore", reason=MISSING)
