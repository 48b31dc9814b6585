"""Pool policy: a job whose accelerator has no node pool in the operator's config waits, loudly."""

from __future__ import annotations

from dpjob_operator.api.pools import PoolConfig
from dpjob_operator.reconcile import reasons as r
from dpjob_operator.reconcile.context import PassContext


def pool_missing(ctx: PassContext, pool: PoolConfig | None) -> bool:
    """True (and Pending/PoolNotConfigured) when the job cannot be placed anywhere.

    Pending, not Failed: the admin can add the pool and the job then starts by itself.
    """
    acc = ctx.job.spec.accelerator
    if pool is None:
        ctx.cond(r.POOL_AVAILABLE, False, r.POOL_NOT_CONFIGURED,
                 f"the operator has no node pool for accelerator {acc!r}; ask the cluster admin "
                 f"to add it to the operator's pools")
        ctx.phase(r.PENDING, r.POOL_NOT_CONFIGURED, f"no node pool configured for accelerator {acc!r}", "Warning")
        return True
    if ctx.status.condition(r.POOL_AVAILABLE):
        ctx.cond(r.POOL_AVAILABLE, True, r.POOL_CONFIGURED, f"node pool {acc!r} is configured")
    return False
