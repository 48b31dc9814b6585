"""The cause of a rank's failure, as the kubelet hands it over: the container's termination message.

Every rank container gets ``terminationMessagePolicy: FallbackToLogsOnError``: whatever the
process wrote to ``/dev/termination-log``, else the tail of its log (a user's script that just
raises leaves its traceback there). torchrun's agent writes the first failed worker's error
(``@record``) as JSON to ``TORCHELASTIC_ERROR_FILE``, which we point at the same file. This module
turns either form into a short excerpt for ``status.lastFailure.message`` and the Warning event.
"""

from __future__ import annotations

import json
from typing import Any

TERMINATION_LOG = "/dev/termination-log"
TERMINATION_POLICY = "FallbackToLogsOnError"
EXCERPT_LIMIT = 1024


def _torchelastic(text: str) -> str | None:
    """The message and the traceback's tail from torchelastic's error.json, if ``text`` is one."""
    try:
        doc: Any = json.loads(text)
    except ValueError:
        return None
    inner = doc.get("message") if isinstance(doc, dict) else None
    if not isinstance(inner, dict):
        return None
    message = str(inner.get("message") or "").strip()
    stack = str((inner.get("extraInfo") or {}).get("py_callstack") or "").strip()
    tail = "\n".join(stack.splitlines()[-6:])
    if message and message not in tail:
        return f"{message}\n{tail}".strip()
    return tail or message or None


def cause_excerpt(message: str | None, limit: int = EXCERPT_LIMIT) -> str:
    """At most ``limit`` characters that say why the rank failed: the end matters most
    (a Python traceback ends with the exception), so a long text keeps its tail."""
    text = (message or "").strip()
    if not text:
        return ""
    text = _torchelastic(text) or text
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1):]
