"""Telling "a peer died" apart from "this rank failed", so the operator blames the right rank.

When one rank dies (OOM kill, SIGKILL, a node lost), every other rank's next collective fails
within milliseconds: gloo says "Connection closed by peer", NCCL aborts the communicator. Those
ranks exit too, and often a moment *before* the kubelet reports the real victim, so an operator
that takes the first failed pod it sees names the wrong rank (and under ``restartPolicy:
ExitCode`` would even call a retryable kill a permanent error). torchelastic solves this with
timestamps in its error files; we add an explicit signal: such a rank exits with
``EXIT_PEER_LOST`` (75, EX_TEMPFAIL: "temporary failure, retry"), which the operator ranks
behind every other failure and always treats as retryable.
"""

from __future__ import annotations

EXIT_PEER_LOST = 75

# Substrings of the errors torch raises on a rank whose peer went away (gloo TCP transport,
# NCCL watchdog/abort, the TCPStore). Matched case-insensitively on the whole message.
PEER_LOSS_MARKERS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "communicator was aborted",
    "nccl communicator",
    "remote process exited",
    "socket closed",
)


def is_peer_loss(exc: BaseException) -> bool:
    """True when ``exc`` says a collective failed because another rank is gone."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"DistNetworkError"}:
        return True
    text = str(exc).lower()
    return any(marker in text for marker in PEER_LOSS_MARKERS)
