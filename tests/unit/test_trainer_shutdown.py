"""The trainer never hangs at exit on a stuck process-group shutdown (pytorch#75097)."""

from __future__ import annotations

import threading
import time

import pytest

from dpjob_trainer.distributed import destroys_group_at_exit, shutdown_process_group

pytestmark = pytest.mark.unit


def test_a_shutdown_that_returns_is_reported_done():
    calls = []
    assert shutdown_process_group(5.0, destroy=lambda: calls.append(1)) is True
    assert calls == [1]


def test_a_shutdown_that_hangs_is_abandoned_after_the_timeout():
    release = threading.Event()
    started = time.monotonic()
    assert shutdown_process_group(0.2, destroy=release.wait) is False
    assert time.monotonic() - started < 2
    release.set()


def test_a_shutdown_that_raises_does_not_hang_either():
    def boom() -> None:
        raise RuntimeError("connection reset by peer")

    assert shutdown_process_group(5.0, destroy=boom) is True


@pytest.mark.parametrize(("backend", "destroys"), [
    ("gloo", False),  # its destructor can hang holding the GIL: the rank exits without it
    ("nccl", True),
    ("hccl", True),
])
def test_only_device_backends_destroy_their_group_at_exit(backend, destroys):
    assert destroys_group_at_exit(backend) is destroys
