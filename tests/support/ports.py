"""The one way tests pick a local TCP port: ask the kernel for a free one."""

from __future__ import annotations

import socket

_ATTEMPTS = 50


def free_port(consecutive: int = 1) -> int:
    """A port p such that p .. p+consecutive-1 are free right now on 127.0.0.1.

    Racy by nature (another process may take it before the caller binds), which is why callers
    bind it at once; ``consecutive`` serves launchers that take a run of ports (a master port
    and the next one for a second job).
    """
    for _ in range(_ATTEMPTS):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base: int = s.getsockname()[1]
        if base + consecutive > 65535:
            continue
        if all(_bindable(port) for port in range(base + 1, base + consecutive)):
            return base
    raise RuntimeError(f"no run of {consecutive} free port(s) after {_ATTEMPTS} attempts")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
