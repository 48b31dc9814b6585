"""The MindSpore loop serves the same step metrics as the torch one, measured, not zeros: its wait
for the next batch and its time in collectives (PyNative runs them in line: all exposed)."""

from __future__ import annotations

import io

import pytest

from dpjob_trainer.__main__ import build_parser
from dpjob_trainer.ms.config import MsConfig
from dpjob_trainer.ms.env import parse_ms_env

pytestmark = [pytest.mark.unit, pytest.mark.mindspore]


def test_a_mindspore_run_reports_its_data_wait_and_collectives_time_and_the_progress_contract():
    from dpjob_trainer.metrics import TrainerMetrics
    from dpjob_trainer.ms.train import MsTrainer

    args = build_parser().parse_args(["--framework", "mindspore", "--task", "mlp", "--steps", "3",
                                      "--dataset-size", "64", "--metrics-port", "0", "--log-every", "0"])
    metrics = TrainerMetrics()
    assert MsTrainer(MsConfig.from_args(args), parse_ms_env({}), metrics, out=io.StringIO()).run() == 0
    samples = {s.name: s.value for family in metrics.registry.collect() for s in family.samples}
    assert samples["dpjob_trainer_data_wait_seconds_total"] > 0
    assert samples["dpjob_trainer_comm_exposed_seconds_total"] > 0
    assert (samples["dpjob_trainer_step"], samples["dpjob_trainer_total_steps"]) == (3, 3)
    assert samples["dpjob_trainer_first_step"] == 1
