"""The trainer's exit codes, the contract with the operator's restart policy (docs/trainer.md).

Pure: imported by the command line before torch, and by both frameworks' loops.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 2  # configuration, environment, rendezvous or rank-table problem: fix and rerun
EXIT_PREEMPTED = 143  # 128 + SIGTERM: checkpointed and stopped; a retryable failure for the operator
# EXIT_NONFINITE (3, nonfinite.py): a NaN/Inf loss, gradient or weight stopped the run; no checkpoint
# was written from it. Permanent under restartPolicy ExitCode.
# EXIT_PEER_LOST (75, peerloss.py): another rank died; the operator blames that one.
