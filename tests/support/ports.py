"""The one way tests pick a local TCP port.

A test hands its port to a process that binds it seconds later: a trainer's rendezvous store binds
MASTER_PORT only after importing torch, which takes tens of seconds on a loaded 2-core host.
Meanwhile every socket the kernel numbers itself (each outgoing connection, each bind to port 0:
gloo's pairs, the cluster's clients) takes a free port from the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), and could take that one. So the port is drawn at
random from a band below that range, where only an explicit bind can take it, and checked free.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_ATTEMPTS = 50
# The band: above the ports fixed services use (the dev cluster's 10250, 19090, ...), below
# Kubernetes' NodePort range (30000-32767) and the kernel's ephemeral range.
BAND = (20000, 30000)
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_RANDOM = random.Random()  # seeded from os.urandom in each process: xdist workers draw apart


def free_port(consecutive: int = 1) -> int:
    """A port p such that p .. p+consecutive-1 are free right now on every local address.

    Still racy against another explicit bind of the same port, which is why callers hand it on
    at once; ``consecutive`` serves launchers that take a run of ports (a master port and the
    next one for a second job).
    """
    low, high = BAND[0], min(BAND[1], _ephemeral_low())
    for _ in range(_ATTEMPTS):
        base = _RANDOM.randrange(low, high - consecutive + 1) if high - low > 1000 else _kernel_port()
        if base + consecutive <= 65536 and all(_bindable(port) for port in range(base, base + consecutive)):
            return base
    raise RuntimeError(f"no run of {consecutive} free port(s) after {_ATTEMPTS} attempts")


def _ephemeral_low() -> int:
    """The ephemeral range's first port (32768 where it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _kernel_port() -> int:
    """A port the kernel picks: where the ephemeral range leaves no band below it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True
