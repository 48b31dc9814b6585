"""Which pass may send its status write together with its first children, not before them.

Everywhere else the status is written first and only a pass whose write landed acts
(``planner.py``): a decided gang restart is never forgotten, and a pass planned from an old view
of the job (its write refused with a 409) acts on nothing. A new job's first pass pays for that
in latency: its status, then its Service, rank table and Workload, then its PodGroup, then its
pods, each a round trip to an API server that answers in 0.5-0.9 s at p99 under 200 jobs on two
cores. Those first passes were the slow end of the reconcile p99.

Before the first write there is nothing to forget (gang generation 0, no restart decided), and
the children that may go out beside it are those a later pass puts right if this one turns out
stale: the headless Service (named and selected by the job's name), the rank table (patched when
its data differ) and the Workload (recreated when its gang template differs); a job deleted
meanwhile takes them along through their owner references. The PodGroup (immutable, and its size
is the spec's) and the pods still wait for the write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpjob_operator.api.status import JobStatus


def writes_alongside(stored_status: Mapping[str, Any]) -> bool:
    """Whether this pass is the job's first: its stored status has no phase yet (every pass that
    writes sets one), so the write may go together with the children named above."""
    return JobStatus.from_dict(stored_status).phase is None
