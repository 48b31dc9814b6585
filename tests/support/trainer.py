"""Running the torch trainer inside the test process: one rank, gloo, no process group.

For tests that read what a user reads (exit code, log events, the report) from runs of a few
steps, where forking a rank would cost more than the run. The trainer is imported only when
called: the MindSpore venv imports tests/support without torch.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any


def run_trainer_in_process(report_dir: Path, args: list[str], metrics: Any = None) -> tuple[int, list[dict], dict]:
    """The CLI's parsing and ``Trainer.run()``; returns (exit code, log events, report)."""
    from dpjob_trainer.__main__ import build_parser
    from dpjob_trainer.config import TrainConfig
    from dpjob_trainer.env import parse_env
    from dpjob_trainer.metrics import NullMetrics
    from dpjob_trainer.stop_flag import StopFlag
    from dpjob_trainer.train import Trainer

    class NoSignals(StopFlag):
        def install(self) -> None:  # leave pytest's own SIGTERM handling alone
            pass

    parsed = build_parser().parse_args(["--metrics-port", "0", "--log-every", "1", "--report", str(report_dir), *args])
    out = io.StringIO()
    trainer = Trainer(TrainConfig.from_args(parsed), parse_env({"DPJOB_BACKEND": "gloo"}), metrics or NullMetrics(),
                      NoSignals(), out)
    code = trainer.run()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return code, events, json.loads((report_dir / "report-rank0.json").read_text())
