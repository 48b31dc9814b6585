"""The hidden test flags' faults (faults.py): a real run gets none, each flag its own."""

from __future__ import annotations

import math

import pytest

from dpjob_trainer.__main__ import build_parser
from dpjob_trainer.config import TrainConfig
from dpjob_trainer.env import parse_env
from dpjob_trainer.faults import FlagFaults, NoFaults, step_hooks
from dpjob_trainer.stop_flag import StopFlag

pytestmark = pytest.mark.unit

TWO_RANKS = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def _hooks(argv: list[str], rank: int = 0, stop: StopFlag | None = None, log: list | None = None,
           environ: dict[str, str] | None = None):
    """The hooks of rank ``rank`` of two (``environ`` replaces the two-rank environment)."""
    cfg = TrainConfig.from_args(build_parser().parse_args(argv))
    env = parse_env(environ if environ is not None else {**TWO_RANKS, "RANK": str(rank)})
    events = log if log is not None else []
    return step_hooks(cfg, env, stop or StopFlag(), lambda event, **fields: events.append((event, fields)))


def _losses(hooks, steps: int, micro_batches: int = 2) -> list[list[float]]:
    """The loss of every micro-batch of steps 0 .. steps-1, as the loop calls the hooks."""
    loss_fn = hooks.wrap_loss(lambda outputs, targets: 1.0)
    seen = []
    for step in range(steps):
        hooks.before_step(step)
        seen.append([loss_fn(None, None) for _ in range(micro_batches)])
    return seen


def test_a_run_without_hidden_flags_has_no_faults():
    hooks = _hooks([])
    assert isinstance(hooks, NoFaults)
    assert _losses(hooks, 3) == [[1.0, 1.0]] * 3 and hooks.after_step(1) is False


@pytest.mark.parametrize("argv", [["--hang-after-step", "5"], ["--inject-nan-at-step", "2"], ["--slow-rank", "1"]])
def test_each_hidden_flag_turns_its_fault_on(argv):
    assert isinstance(_hooks(argv), FlagFaults)


def test_nan_is_injected_in_the_first_micro_batch_of_steps_k_to_k_plus_n_minus_1_on_rank_1_only():
    argv = ["--inject-nan-at-step", "3", "--inject-nan-steps", "2"]
    victim = _losses(_hooks(argv, rank=1), 5)
    nan_steps = [step + 1 for step, losses in enumerate(victim) if math.isnan(losses[0])]
    assert nan_steps == [3, 4]  # 1-based, like the logs
    assert not any(math.isnan(loss) for losses in victim for loss in losses[1:])
    assert not any(math.isnan(loss) for losses in _losses(_hooks(argv, rank=0), 5) for loss in losses)


def test_a_lone_rank_is_its_own_nan_victim():
    losses = _losses(_hooks(["--inject-nan-at-step", "1"], environ={}), 2)
    assert math.isnan(losses[0][0]) and not math.isnan(losses[1][0])


def test_the_first_gang_hangs_after_step_n_until_sigterm_and_a_restarted_one_does_not():
    stop, log = StopFlag(), []
    stop.requested = True  # SIGTERM already arrived: the hang ends at once
    hooks = _hooks(["--hang-after-step", "4"], stop=stop, log=log)
    assert [hooks.after_step(step) for step in (3, 4)] == [False, True]
    assert [event for event, _ in log] == ["hang"] and log[0][1]["step"] == 4
    second_gang = {**TWO_RANKS, "RANK": "0", "DPJOB_RESTART_COUNT": "1"}
    restarted = _hooks(["--hang-after-step", "4"], stop=stop, environ=second_gang)
    assert restarted.after_step(4) is False


@pytest.mark.parametrize(("rank", "restart_count", "sleeps"), [
    (1, 0, [0.25, 0.25]),  # the slow rank of the first gang holds every step back
    (0, 0, []),            # the other ranks do not sleep
    (1, 1, []),            # a restarted gang catches up at full speed
])
def test_the_slow_rank_sleeps_in_every_step_of_the_first_gang_only(monkeypatch, rank, restart_count, sleeps):
    slept: list[float] = []
    monkeypatch.setattr("dpjob_trainer.faults.time.sleep", slept.append)
    environ = {**TWO_RANKS, "RANK": str(rank), "DPJOB_RESTART_COUNT": str(restart_count)}
    hooks = _hooks(["--slow-rank", "1", "--slow-seconds", "0.25"], environ=environ)
    for step in range(2):
        hooks.before_step(step)
    assert slept == sleeps
