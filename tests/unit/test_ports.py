"""The port tests hand to trainers is one the kernel never numbers a socket with by itself."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.ports import BAND, free_port

pytestmark = pytest.mark.unit


def test_a_run_of_free_ports_lies_below_the_ephemeral_range_and_binds():
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    port = free_port(2)
    if min(BAND[1], ephemeral_low) - BAND[0] > 1000:  # a host whose ephemeral range leaves the band room
        assert BAND[0] <= port and port + 1 < min(BAND[1], ephemeral_low)
    for p in (port, port + 1):
        with socket.socket() as s:
            s.bind(("0.0.0.0", p))
