"""The trainer's outputs that do not depend on the framework: JSON log lines and the report file.

Both the torch loop (train.py) and the MindSpore loop (ms/train.py) write them, so they live in a
module that imports neither framework: a log reader or a test sees the same shapes whichever
framework trained.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

from .checkpoint import atomic_write
from .nonfinite import json_number


def emit(event: str, out: TextIO = sys.stdout, **fields: Any) -> None:
    """One JSON object per line on stdout: what ``kubectl logs`` users grep and parse.

    A NaN or Inf number is written as text ("nan", "inf"): json.dumps would write a bare ``NaN``,
    which is not JSON and breaks strict readers of the line.
    """
    safe = {k: json_number(v) if isinstance(v, float) else v for k, v in fields.items()}
    out.write(json.dumps({"event": event, "time": round(time.time(), 3), **safe}) + "\n")
    out.flush()


def report_path(report_dir: str, rank: int) -> str:
    """``report-rank<R>.json``: one file per rank, so ranks never write the same path."""
    return os.path.join(report_dir, f"report-rank{rank}.json")


def write_report(report_dir: str, rank: int, report: dict[str, Any]) -> str:
    """Write the rank's report atomically (a reader polling the file never sees half of it)."""
    path = report_path(report_dir, rank)
    atomic_write(path, lambda fh: fh.write(json.dumps(report, indent=2).encode()))
    return path
