"""``--framework mindspore``: checks, metrics endpoint and rank-table wait, then the MindSpore loop.

The same order as the torch path in __main__.py, for the same reason: a misconfigured pod fails
with exit code 2 and one line before mindspore (seconds to import) is loaded. One difference:
msrun also runs the script in its scheduler process (``MS_ROLE=MS_SCHED``), which must only host
the cluster: it calls ``init()`` before serving metrics, so it never takes rank 0's metrics port,
and never trains or writes a report.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from ..config import ConfigError
from ..env import EnvError
from ..metrics import NullMetrics, TrainerMetrics, linger
from ..ranktable import RankTableTimeout, wait_for_rank_table
from .config import MsConfig
from .env import MsEnv, parse_ms_env
from .sharding import ShardError


def _metrics(args: argparse.Namespace, env: MsEnv) -> NullMetrics:
    """The per-process endpoint on ``--metrics-port + local rank`` (OSError when taken)."""
    if not args.metrics_port:
        return NullMetrics()
    live = TrainerMetrics()
    live.serve(args.metrics_port + env.local_rank, args.metrics_addr)
    return live


def _must_wait(env: MsEnv, mode: str) -> bool:
    """The rank-table start-up reads RANK_TABLE_FILE in init(); msrun's dynamic cluster does not."""
    if mode == "never" or not env.rank_table_file:
        return False
    return mode == "always" or env.mode == "ranktable"


def run_mindspore(args: argparse.Namespace, environ: Mapping[str, str], fail: Callable[[str], int]) -> int:
    """Run one MindSpore process; returns its exit code (``fail`` prints the one-line errors)."""
    try:
        cfg = MsConfig.from_args(args)
        env = parse_ms_env(environ)
    except (ConfigError, EnvError) as exc:
        return fail(str(exc))
    if env.scheduler:
        from .runtime import host_scheduler

        host_scheduler()
        return 0
    try:
        metrics = _metrics(args, env)
    except OSError as exc:
        return fail(f"cannot serve metrics on port {args.metrics_port + env.local_rank} (--metrics-port "
                    f"{args.metrics_port} + local rank {env.local_rank}): {exc.strerror or exc}")
    try:
        if env.rank_table_file and _must_wait(env, args.rank_table_wait):
            wait_for_rank_table(env.rank_table_file, timeout=args.rank_table_timeout, poll=1.0)
        from .train import MsTrainer

        code = MsTrainer(cfg, env, metrics).run()
    except (ConfigError, EnvError, ShardError, RankTableTimeout) as exc:
        return fail(str(exc))
    if args.metrics_linger > 0 and args.metrics_port:
        linger(args.metrics_linger)
    metrics.close()
    return code
