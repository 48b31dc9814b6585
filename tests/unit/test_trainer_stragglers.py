"""Straggler detection: a rank is reported only when it is consistently slower than the median."""

from __future__ import annotations

import pytest

from dpjob_trainer.stragglers import StragglerDetector

pytestmark = pytest.mark.unit

FAST, SLOW = 0.020, 0.060

CASES = [
    # (name, steps of own times, expected straggler after the last step, expected slowest)
    ("one slow rank, three steps in a row", [[FAST, FAST, SLOW]] * 3, 2, 2),
    ("not yet: two steps", [[FAST, FAST, SLOW]] * 2, None, 2),
    ("a blip is not a straggler", [[FAST, FAST, SLOW], [FAST, FAST, FAST], [FAST, FAST, SLOW]], None, 2),
    ("the slow rank changes: the streak restarts",
     [[FAST, FAST, SLOW], [FAST, FAST, SLOW], [SLOW, FAST, FAST]], None, 0),
    ("under the factor", [[FAST, FAST, FAST * 1.4]] * 5, None, 2),
    ("exactly at the factor", [[FAST, FAST, FAST * 1.5]] * 3, 2, 2),
    ("two ranks: the slower of two", [[FAST, FAST * 4]] * 3, 1, 1),
    ("scheduler noise on millisecond steps", [[0.001, 0.001, 0.003]] * 5, None, 2),
]


@pytest.mark.parametrize(("steps", "straggler", "slowest"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_straggler_is_consistently_at_least_factor_times_the_median(steps, straggler, slowest):
    detector = StragglerDetector(factor=1.5, window=3)
    times = None
    for own in steps:
        times = detector.observe(own)
    assert times is not None and times.straggler == straggler and times.slowest_rank == slowest


@pytest.mark.parametrize("own", [[], [FAST], [FAST, 0.0], [0.0, 0.0]],
                         ids=["none", "one rank", "a rank not yet", "none yet"])
def test_no_verdict_until_every_rank_reported(own):
    assert StragglerDetector().observe(own) is None


def test_the_ratio_is_the_slowest_over_the_median():
    times = StragglerDetector().observe([FAST, FAST, SLOW])
    assert times is not None and times.ratio == pytest.approx(3.0) and times.median_seconds == FAST


@pytest.mark.parametrize(("factor", "window"), [(1.0, 3), (0.5, 3), (1.5, 0)])
def test_a_factor_of_one_or_less_is_refused(factor, window):
    with pytest.raises(ValueError):
        StragglerDetector(factor, window)


@pytest.mark.parametrize(("flag", "detects"), [("0", False), ("1.5", True), ("3", True)])
def test_a_straggler_factor_of_zero_turns_detection_off(flag, detects):
    pytest.importorskip("torch")
    from dpjob_trainer.__main__ import build_parser
    from dpjob_trainer.config import TrainConfig
    from dpjob_trainer.env import parse_env
    from dpjob_trainer.metrics import NullMetrics
    from dpjob_trainer.stop_flag import StopFlag
    from dpjob_trainer.train import Trainer

    args = vars(build_parser().parse_args(["--straggler-factor", flag]))
    cfg = TrainConfig(**{k: v for k, v in args.items() if k in TrainConfig.__dataclass_fields__})
    trainer = Trainer(cfg, parse_env({}), NullMetrics(), StopFlag())
    assert (trainer.stragglers is not None) is detects
