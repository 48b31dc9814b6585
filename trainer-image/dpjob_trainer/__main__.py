"""Command line of the trainer: ``python -m dpjob_trainer`` / ``dpjob-trainer``.

Order matters for the user: the environment is validated and the rank table awaited *before*
torch is imported, so a misconfigured pod fails in well under a second with exit code 2 and
one line naming what to fix. Flags and exit codes are documented in docs/trainer.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence

from .env import DistEnv, EnvError, parse_env
from .frameworks import FrameworkError, resolve_framework
from .metrics import NullMetrics, TrainerMetrics
from .peerloss import EXIT_PEER_LOST, is_peer_loss
from .ranktable import RankTableTimeout, must_wait_for_rank_table, wait_for_rank_table
from .stragglers import DEFAULT_FACTOR

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpjob-trainer",
        description="Data-parallel (DDP) trainer for DataParallelJob pods; "
                    "reads WORLD_SIZE/RANK/MASTER_* from the env.",
    )
    what = p.add_argument_group("what to train")
    what.add_argument("--framework", default=None,
                      help="torch (DDP) or mindspore (msrun / rank table); default $DPJOB_FRAMEWORK, else torch")
    what.add_argument("--task", default="mlp", help="built-in task: linear, mlp, cnn or transformer (default mlp)")
    what.add_argument("--entrypoint", help="module:function returning (model, dataset[, loss_fn]); overrides --task")
    what.add_argument("--dataset-size", type=int, help="samples in the synthetic mlp/cnn/transformer dataset")
    what.add_argument("--model-width", type=int,
                      help="--task transformer: embedding width (default 256; heads of 64, 4 layers)")
    what.add_argument("--seed", type=int, default=0, help="same on every rank: model init and data order")

    how = p.add_argument_group("optimisation")
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

    state = p.add_argument_group("checkpoints and output")
    state.add_argument("--checkpoint-dir", help="shared volume for checkpoint.pt; resume from it if present")
    state.add_argument("--checkpoint-every", type=int, default=0,
                       help="checkpoint every N steps (0: only on SIGTERM and at the end)")
    state.add_argument("--no-resume", dest="resume", action="store_false", help="ignore an existing checkpoint")
    state.add_argument("--report", dest="report_dir", help="write report-rank<R>.json into this directory")
    state.add_argument("--log-every", type=int, default=10, help="one JSON log line every N steps (0: off)")

    ops = p.add_argument_group("cluster")
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
    # Test hook for the operator's stall watchdog (tests/e2e/test_progress_e2e.py): after this step the
    # first gang stops stepping but keeps serving metrics, until SIGTERM. Hidden: not for training.
    ops.add_argument("--hang-after-step", type=int, default=0, help=argparse.SUPPRESS)
    # Test hook for --nonfinite (tests/unit/test_trainer_nonfinite.py): rank 1 (rank 0 when alone)
    # gets a NaN loss in steps K .. K+N-1 of every gang. Hidden: not for training.
    ops.add_argument("--inject-nan-at-step", type=int, default=0, help=argparse.SUPPRESS)
    ops.add_argument("--inject-nan-steps", type=int, default=1, help=argparse.SUPPRESS)
    ops.add_argument("--straggler-factor", type=float,
                     default=float(os.environ.get("DPJOB_STRAGGLER_FACTOR") or DEFAULT_FACTOR),
                     help="a rank whose own step time is this many times the median for 3 steps is reported "
                          "as a straggler (default $DPJOB_STRAGGLER_FACTOR or 1.5; must be > 1, or 0: off)")
    # Test hook for straggler detection (tests/e2e): this rank sleeps --slow-seconds in every step.
    ops.add_argument("--slow-rank", type=int, default=-1, help=argparse.SUPPRESS)
    ops.add_argument("--slow-seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    return p


def fail(message: str) -> int:
    """One line on stderr, exit code 2: the contract for anything the user must fix."""
    sys.stderr.write(f"dpjob-trainer: error: {message}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def _exit_peer_lost(exc: BaseException) -> None:
    """Another rank died: say so in one line and leave with EXIT_PEER_LOST (see peerloss.py).

    os._exit: the broken process group's threads would hang interpreter teardown (pytorch#75097).
    """
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    sys.stderr.write(f"dpjob-trainer: lost a peer, exiting with {EXIT_PEER_LOST} so the operator "
                     f"blames the rank that died: {first}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_PEER_LOST)


def _threads(args: argparse.Namespace, env: DistEnv) -> int | None:
    if args.num_threads:
        return int(args.num_threads)
    if env.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
        # N processes each using every core thrash each other; torchrun makes the same choice.
        return max(1, (os.cpu_count() or 1) // env.local_world_size)
    return None


def _linger(seconds: float) -> None:
    """Keep the metrics endpoint up after training (final scrape); SIGTERM ends it early."""
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    deadline = time.monotonic() + seconds
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.05)


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
    except EnvError as exc:
        return fail(str(exc))

    metrics: NullMetrics = NullMetrics()
    if args.metrics_port:
        port = args.metrics_port + env.local_rank
        live = TrainerMetrics()
        try:
            live.serve(port, args.metrics_addr)
        except OSError as exc:
            return fail(f"cannot serve metrics on port {port} (--metrics-port {args.metrics_port} "
                        f"+ LOCAL_RANK {env.local_rank}): {exc.strerror or exc}; "
                        f"choose another --metrics-port or 0 to disable")
        metrics = live

    try:
        if env.rank_table_file and must_wait_for_rank_table(env.requested_backend, args.rank_table_wait):
            wait_for_rank_table(env.rank_table_file, timeout=args.rank_table_timeout, poll=1.0)

        import torch  # deferred: the checks above must fail fast

        from .distributed import RendezvousError
        from .tasks import TaskError
        from .train import ConfigError, StopFlag, TrainConfig, Trainer

        threads = _threads(args, env)
        if threads:
            torch.set_num_threads(threads)
        cfg = TrainConfig(**{k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__})
        trainer = Trainer(cfg, env, metrics, StopFlag())
        try:
            code = trainer.run()
            if trainer.failure:  # EXIT_NONFINITE: the same one line as a usage error, its own code
                sys.stderr.write(f"dpjob-trainer: error: {trainer.failure}\n")
                sys.stderr.flush()
        except (EnvError, RendezvousError, ConfigError, TaskError) as exc:
            return fail(str(exc))
        except RuntimeError as exc:
            if not is_peer_loss(exc):
                raise
            _exit_peer_lost(exc)
    except RankTableTimeout as exc:
        return fail(str(exc))
    if args.metrics_linger > 0 and args.metrics_port:
        _linger(args.metrics_linger)
    metrics.close()
    if trainer.exit_hard:
        # A stuck process-group thread would hang interpreter teardown: leave now, work is saved.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
