"""Command line of the trainer: ``python -m dpjob_trainer`` / ``dpjob-trainer``.

Order matters for the user: the environment is validated and the rank table awaited *before*
torch is imported, so a misconfigured pod fails in well under a second with exit code 2 and
one line naming what to fix. Flags and exit codes are documented in docs/trainer.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from .env import DistEnv, EnvError, parse_env
from .events import emit
from .exit_record import mark_running, record_exit
from .exits import EXIT_USAGE
from .frameworks import FrameworkError, resolve_framework
from .metrics import NullMetrics, TrainerMetrics, linger
from .peerloss import EXIT_PEER_LOST, is_peer_loss
from .preload import preload
from .ranktable import RankTableTimeout, must_wait_for_rank_table, wait_for_rank_table
from .stragglers import DEFAULT_FACTOR
from .warm import Supervisor, WarmPolicy, request_cold_restart, warm_policy


def _announce_wait(path: str, status: str | None) -> None:
    emit("ranktable_wait", file=path, status=status)

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpjob-trainer",
        description="Data-parallel (DDP) trainer for DataParallelJob pods; "
                    "reads WORLD_SIZE/RANK/MASTER_* from the env.",
    )
    _what_to_train(p.add_argument_group("what to train"))
    _optimisation(p.add_argument_group("optimisation"))
    _output(p.add_argument_group("checkpoints and output"))
    ops = p.add_argument_group("cluster")
    _cluster(ops)
    _test_hooks(ops)
    return p


def _what_to_train(what: argparse._ArgumentGroup) -> None:
    what.add_argument("--framework", default=None,
                      help="torch (DDP) or mindspore (msrun / rank table); default $DPJOB_FRAMEWORK, else torch")
    what.add_argument("--task", default="mlp", help="built-in task: linear, mlp, cnn or transformer (default mlp)")
    what.add_argument("--entrypoint", help="module:function returning (model, dataset[, loss_fn]); overrides --task")
    what.add_argument("--dataset-size", type=int, help="samples in the synthetic mlp/cnn/transformer dataset")
    what.add_argument("--model-width", type=int,
                      help="--task transformer: embedding width (default 256; heads of 64, 4 layers)")
    what.add_argument("--seed", type=int, default=0, help="same on every rank: model init and data order")


def _optimisation(how: argparse._ArgumentGroup) -> None:
    how.add_argument("--steps", type=int, help="optimizer steps in total (task default if unset)")
    how.add_argument("--epochs", type=float, help="train this many epochs instead of --steps")
    how.add_argument("--batch-size", type=int, help="samples per rank per micro-batch (global = world size x this)")
    how.add_argument("--lr", type=float, help="learning rate (task default if unset)")
    how.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    how.add_argument("--momentum", type=float, default=0.0)
    how.add_argument("--weight-decay", type=float, default=0.0)
    how.add_argument("--grad-reduction", choices=["mean", "sum"], default="mean",
                     help="all-reduce mean (default; equals single device) or sum (N x the mean gradient)")
    how.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    how.add_argument("--clip-grad-norm", type=float, default=0.0,
                     help="clip the reduced gradient to this L2 norm (0: off)")
    how.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                     help="autocast dtype of the forward pass: fp32 (default), bf16, or fp16 with loss scaling")
    how.add_argument("--amp", action="store_true", help="the same as --precision bf16")
    how.add_argument("--tail", choices=["keep", "drop"], default="keep",
                     help="uneven last global batch: keep (every sample once per epoch) or drop")
    how.add_argument("--shuffle", dest="shuffle", action="store_true", default=None, help="reshuffle every epoch")
    how.add_argument("--no-shuffle", dest="shuffle", action="store_false")
    how.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes per rank")
    how.add_argument("--num-threads", type=int, help="torch intra-op threads (default: cores / LOCAL_WORLD_SIZE)")
    how.add_argument("--nonfinite", choices=["stop", "skip"], default="stop",
                     help="a NaN/Inf loss or gradient on any rank: stop without applying it or checkpointing "
                          "(exit 3; default), or skip that update and go on")
    how.add_argument("--max-nonfinite-steps", type=int, default=3,
                     help="--nonfinite skip: stop (exit 3) at the next non-finite step after this many "
                          "consecutive skipped ones (default 3)")


def _output(state: argparse._ArgumentGroup) -> None:
    state.add_argument("--checkpoint-dir", help="shared volume for checkpoint.pt; resume from it if present")
    state.add_argument("--checkpoint-every", type=int, default=0,
                       help="checkpoint every N steps (0: only on SIGTERM and at the end)")
    state.add_argument("--no-resume", dest="resume", action="store_false", help="ignore an existing checkpoint")
    state.add_argument("--report", dest="report_dir", help="write report-rank<R>.json into this directory")
    state.add_argument("--log-every", type=int, default=10, help="one JSON log line every N steps (0: off)")


def _cluster(ops: argparse._ArgumentGroup) -> None:
    # The operator sets DPJOB_METRICS_PORT (the trainer container's "metrics" port) and reads rank 0's
    # endpoint there for status.progress; argparse applies type=int to a string default too.
    ops.add_argument("--metrics-port", type=int, default=os.environ.get("DPJOB_METRICS_PORT") or 9090,
                     help="base port; this process serves port + LOCAL_RANK (0: off; default $DPJOB_METRICS_PORT "
                          "or 9090)")
    ops.add_argument("--metrics-addr", default="0.0.0.0")
    ops.add_argument("--metrics-linger", type=float, default=0.0,
                     help="keep serving metrics this many seconds after training")
    ops.add_argument("--rank-table-timeout", type=float, default=600.0,
                     help="seconds to wait for RANK_TABLE_FILE to complete")
    ops.add_argument("--rank-table-wait", choices=["auto", "always", "never"], default="auto",
                     help="wait for RANK_TABLE_FILE before joining: auto = only for backends that read it (hccl)")
    ops.add_argument("--rendezvous-timeout", type=float, default=900.0,
                     help="seconds to wait for all ranks at MASTER_ADDR:MASTER_PORT")
    ops.add_argument("--collective-timeout", type=float, default=1800.0,
                     help="seconds one collective may hang before failing")
    ops.add_argument("--shutdown-timeout", type=float, default=30.0,
                     help="seconds to wait for the process group to shut down after training before exiting without it")
    ops.add_argument("--straggler-factor", type=float,
                     default=float(os.environ.get("DPJOB_STRAGGLER_FACTOR") or DEFAULT_FACTOR),
                     help="a rank whose own step time is this many times the median for 3 steps is reported "
                          "as a straggler (default $DPJOB_STRAGGLER_FACTOR or 1.5; must be > 1, or 0: off)")


def _test_hooks(ops: argparse._ArgumentGroup) -> None:
    """Hidden flags for the tests' faults (faults.py); not for training."""
    # Test hook for the operator's stall watchdog (tests/e2e/test_progress_e2e.py): after this step the
    # first gang stops stepping but keeps serving metrics, until SIGTERM. Hidden: not for training.
    ops.add_argument("--hang-after-step", type=int, default=0, help=argparse.SUPPRESS)
    # Test hook for --nonfinite (tests/unit/test_trainer_nonfinite.py): rank 1 (rank 0 when alone)
    # gets a NaN loss in steps K .. K+N-1 of every gang. Hidden: not for training.
    ops.add_argument("--inject-nan-at-step", type=int, default=0, help=argparse.SUPPRESS)
    ops.add_argument("--inject-nan-steps", type=int, default=1, help=argparse.SUPPRESS)
    # Test hook for straggler detection and paced runs (tests/e2e): this rank sleeps --slow-seconds in
    # every step of the first gang; a restarted gang (DPJOB_RESTART_COUNT > 0) catches up at full speed.
    ops.add_argument("--slow-rank", type=int, default=-1, help=argparse.SUPPRESS)
    ops.add_argument("--slow-seconds", type=float, default=0.0, help=argparse.SUPPRESS)


def fail(message: str) -> int:
    """One line on stderr, exit code 2: the contract for anything the user must fix."""
    sys.stderr.write(f"dpjob-trainer: error: {message}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def _exit_peer_lost(exc: BaseException) -> NoReturn:
    """Another rank died: say so in one line and leave with EXIT_PEER_LOST (see peerloss.py).

    os._exit: the broken process group's threads would hang interpreter teardown (pytorch#75097).
    """
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    sys.stderr.write(f"dpjob-trainer: lost a peer, exiting with {EXIT_PEER_LOST} so the operator "
                     f"blames the rank that died: {first}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    record_exit(EXIT_PEER_LOST)
    os._exit(EXIT_PEER_LOST)


def _threads(args: argparse.Namespace, env: DistEnv) -> int | None:
    if args.num_threads:
        return int(args.num_threads)
    if env.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
        # N processes each using every core thrash each other; torchrun makes the same choice.
        return max(1, (os.cpu_count() or 1) // env.local_world_size)
    return None


class _UsageError(Exception):
    """Something the user must fix, found once torch is loaded: one line, exit code 2."""


def _serve_metrics(args: argparse.Namespace, env: DistEnv) -> NullMetrics:
    """The endpoint on ``--metrics-port + LOCAL_RANK`` (``NullMetrics`` for port 0)."""
    if not args.metrics_port:
        return NullMetrics()
    port = args.metrics_port + env.local_rank
    live = TrainerMetrics()
    try:
        live.serve(port, args.metrics_addr)
    except OSError as exc:
        raise EnvError(f"cannot serve metrics on port {port} (--metrics-port {args.metrics_port} "
                       f"+ LOCAL_RANK {env.local_rank}): {exc.strerror or exc}; "
                       f"choose another --metrics-port or 0 to disable") from exc
    return live


def _run_torch(args: argparse.Namespace, env: DistEnv, metrics: NullMetrics) -> tuple[int, bool]:
    """Train with torch; returns (exit code, whether to leave without interpreter teardown)."""
    import torch  # deferred: the checks before must fail fast

    from .config import ConfigError, TrainConfig
    from .distributed import RendezvousError
    from .handshake import GangMovedOn
    from .stop_flag import StopFlag
    from .tasks import TaskError
    from .train import Trainer

    threads = _threads(args, env)
    if threads:
        torch.set_num_threads(threads)
    trainer = Trainer(TrainConfig.from_args(args), env, metrics, StopFlag())
    try:
        code = trainer.run()
    except (EnvError, RendezvousError, ConfigError, TaskError) as exc:
        raise _UsageError(str(exc)) from exc
    except GangMovedOn as exc:
        request_cold_restart()
        _exit_peer_lost(exc)
    except RuntimeError as exc:
        if not is_peer_loss(exc):
            raise
        _exit_peer_lost(exc)
    if trainer.failure:  # EXIT_NONFINITE: the same one line as a usage error, its own code
        sys.stderr.write(f"dpjob-trainer: error: {trainer.failure}\n")
        sys.stderr.flush()
    return code, trainer.exit_hard


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        framework = resolve_framework(args.framework, os.environ)
    except FrameworkError as exc:
        return fail(str(exc))
    if framework == "mindspore":
        from .ms.cli import run_mindspore  # imports mindspore only once the environment checks pass

        return run_mindspore(args, os.environ, fail)
    try:
        env = parse_env(os.environ)
        metrics = _serve_metrics(args, env)
    except EnvError as exc:
        return fail(str(exc))
    try:
        if env.rank_table_file and must_wait_for_rank_table(env.requested_backend, args.rank_table_wait):
            wait_for_rank_table(env.rank_table_file, timeout=args.rank_table_timeout, poll=1.0,
                                waiting=functools.partial(_announce_wait, env.rank_table_file))
        code, exit_hard = _run_torch(args, env, metrics)
    except (RankTableTimeout, _UsageError) as exc:
        return fail(str(exc))
    if args.metrics_linger > 0 and args.metrics_port:
        linger(args.metrics_linger)
    metrics.close()
    if exit_hard:
        # Interpreter teardown would destroy the process group, which can hang: leave now, work is saved.
        sys.stdout.flush()
        sys.stderr.flush()
        record_exit(code)
        os._exit(code)
    return code


def _warm(argv: Sequence[str] | None) -> WarmPolicy | None:
    """The warm-restart policy when this process should supervise (warm.py): torch, metrics on, a
    valid environment. Anything wrong is left to ``main``, which says it in one line."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            args, _ = build_parser().parse_known_args(argv)
            if resolve_framework(args.framework, os.environ) != "torch":
                return None
            parse_env(os.environ)
        except (SystemExit, FrameworkError, EnvError):
            return None
    return warm_policy(os.environ, args.metrics_port)


def run(argv: Sequence[str] | None = None) -> int:
    """``main`` with its exit code recorded for a pod restarted in place (exit_record.py), in
    training processes forked by a warm-restart supervisor when the operator asks for one."""
    mark_running()
    code = 1  # an uncaught exception: Python's own exit code
    try:
        policy = _warm(argv)
        if policy is None:
            code = main(argv)
        else:
            preload()
            code = Supervisor(policy, functools.partial(main, argv), before_start=mark_running).run()
    finally:
        record_exit(code)
    return code


if __name__ == "__main__":
    sys.exit(run())
