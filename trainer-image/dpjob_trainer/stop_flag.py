"""SIGTERM as a flag: set by the signal, read at step boundaries."""

from __future__ import annotations

import signal
from typing import Any


class StopFlag:
    """Set by SIGTERM; acted on only at a step boundary so every rank stops at the same step."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
