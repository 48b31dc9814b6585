"""What the trainer does when a step's loss or gradient is not finite (NaN or Inf).

Without a rule, one NaN loss poisons the weights through ``optimizer.step()`` and the next
checkpoint then overwrites the only good one: the job can neither continue nor resume. So the
loop checks every step *before* the update, and ``--nonfinite`` picks the answer:

* ``stop`` (default): do not apply the update, write no checkpoint, exit with
  ``EXIT_NONFINITE``. The last checkpoint stays the last good state.
* ``skip``: do not apply the update (parameters and optimizer state unchanged) and go on with the
  next batch. A skipped step still consumes its batch and counts as a step: the data order is a
  function of the step number, so a resumed run sees the same batches, and retrying the batch
  that produced the NaN would most likely produce it again. More than ``--max-nonfinite-steps``
  consecutive non-finite steps mean the run has diverged rather than met one bad batch: it stops
  like ``stop`` does.

Every rank must take the same decision, or DDP desynchronises (one rank updates, another does
not, and their parameters differ from then on). A rank's own loss can be NaN while every other
rank's loss and all reduced gradients are finite, so the decision is taken from a per-rank flag
that is summed over ranks in the step's all-reduce (train.py): every rank sees the same sum.

``EXIT_NONFINITE`` is 3: 1 is an unexpected crash, 2 a usage error, 75 a lost peer (retryable),
143 a SIGTERM (retryable). Exit codes 1-127 are permanent under ``restartPolicy: ExitCode``: the
operator fails the job at once instead of restarting a run whose numbers have diverged. Under
``OnFailure`` a restart resumes from the last good checkpoint, charged to ``backoffLimit``.

This module is pure (no torch), like env.py and sharding.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

EXIT_NONFINITE = 3
MODES = ("stop", "skip")

Verdict = Literal["apply", "skip", "stop"]


def json_number(value: float) -> float | str:
    """``value``, or ``"nan"``/``"inf"``/``"-inf"`` as text: JSON has no NaN, and log lines must
    stay parseable by strict readers (jq, Go's encoding/json)."""
    return value if math.isfinite(value) else str(value)


@dataclass
class NonfinitePolicy:
    """The ``--nonfinite`` rule and its counters for one run of the loop."""

    mode: str = "stop"
    max_consecutive: int = 3
    skipped: int = 0  # steps skipped in this run
    consecutive: int = 0  # non-finite steps in a row, up to and including the last one

    def validate(self) -> None:
        """Raise ValueError for a flag combination that cannot work."""
        if self.mode not in MODES:
            raise ValueError(f"--nonfinite must be stop or skip, got {self.mode!r}")
        if self.max_consecutive < 1:
            raise ValueError(f"--max-nonfinite-steps must be >= 1, got {self.max_consecutive} "
                             f"(use --nonfinite stop to skip no step at all)")

    def decide(self, nonfinite: bool) -> Verdict:
        """The verdict for one step; ``nonfinite`` must be the same on every rank."""
        if not nonfinite:
            self.consecutive = 0
            return "apply"
        self.consecutive += 1
        if self.mode == "stop" or self.consecutive > self.max_consecutive:
            return "stop"
        self.skipped += 1
        return "skip"

    def stop_reason(self) -> str:
        """Why ``decide`` said stop, in words for the error line."""
        if self.mode == "stop":
            return "--nonfinite stop"
        return (f"{self.consecutive} consecutive non-finite steps, more than --max-nonfinite-steps "
                f"{self.max_consecutive}")
