"""Which framework trains: ``--framework torch|mindspore``, default from ``DPJOB_FRAMEWORK``.

Pure and framework-free: the choice is made before either framework is imported, so a typo fails
in milliseconds with exit code 2. The operator sets ``DPJOB_FRAMEWORK`` to the job's
``spec.framework`` (``pytorch``, ``mindspore`` or ``oneflow``). OneFlow's launch environment is
torch's (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK) and this image has no OneFlow
runtime, so an image run under ``framework: oneflow`` trains with torch, as it did before the flag
existed; asking for ``--framework oneflow`` explicitly is refused rather than silently swapped.
"""

from __future__ import annotations

from collections.abc import Mapping

FRAMEWORKS = ("torch", "mindspore")
# spec.framework values of the operator that this image serves, and the trainer that serves them.
_ENV_ALIASES = {"torch": "torch", "pytorch": "torch", "oneflow": "torch", "mindspore": "mindspore"}
_FLAG_ALIASES = {"torch": "torch", "pytorch": "torch", "mindspore": "mindspore"}


class FrameworkError(ValueError):
    """An unknown framework; the message lists the known ones."""


def resolve_framework(flag: str | None, environ: Mapping[str, str]) -> str:
    """``torch`` or ``mindspore``: the flag if given, else ``DPJOB_FRAMEWORK``, else torch."""
    if flag is not None and flag.strip():
        name = flag.strip().lower()
        if name not in _FLAG_ALIASES:
            raise FrameworkError(f"--framework must be one of {', '.join(FRAMEWORKS)}, got {flag!r}")
        return _FLAG_ALIASES[name]
    raw = (environ.get("DPJOB_FRAMEWORK") or "").strip()
    if not raw:
        return "torch"
    if raw.lower() not in _ENV_ALIASES:
        raise FrameworkError(
            f"DPJOB_FRAMEWORK must be one of {', '.join(sorted(_ENV_ALIASES))}, got {raw!r}; "
            f"or pass --framework {'|'.join(FRAMEWORKS)}")
    return _ENV_ALIASES[raw.lower()]
