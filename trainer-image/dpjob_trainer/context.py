"""What every part of one rank's run reads: the flags, where the process sits, its outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TextIO

import torch

from .config import TrainConfig
from .env import DistEnv
from .events import emit
from .metrics import NullMetrics
from .precision import Precision
from .settings import Settings
from .stop_flag import StopFlag


@dataclass(frozen=True)
class Outputs:
    """Where the run reports: JSON log lines, the metrics endpoint, and the SIGTERM flag it obeys."""

    env: DistEnv
    metrics: NullMetrics
    stop: StopFlag
    out: TextIO

    def log(self, event: str, **fields: Any) -> None:
        emit(event, self.out, rank=self.env.rank, **fields)


@dataclass(frozen=True)
class RunContext:
    """One rank's run once its device, task settings and precision are known."""

    cfg: TrainConfig
    io: Outputs
    backend: str
    device: torch.device
    settings: Settings
    precision: Precision

    @property
    def env(self) -> DistEnv:
        return self.io.env

    @property
    def metrics(self) -> NullMetrics:
        return self.io.metrics

    def log(self, event: str, **fields: Any) -> None:
        self.io.log(event, **fields)
