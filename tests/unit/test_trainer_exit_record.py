"""The trainer's side of a restart in place: the generation from the counter's file, and its exit
recorded where the counter reads it (dpjob_trainer/exit_record.py)."""

from __future__ import annotations

import pytest

from dpjob_trainer.env import parse_env
from dpjob_trainer.exit_record import mark_running, record_exit, restarts_in_place

pytestmark = pytest.mark.unit
WORLD = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("content, env_count, want", [
    (None, "2", 2),         # not restarted in place: the pod's own generation
    ("0", "2", 2),          # the pod's first start
    ("3", "2", 5),          # three restarts in place since the pod was created at generation 2
    ("garbage", "1", 1),    # an unreadable file never breaks the trainer
])
def test_the_generation_a_rank_sees_adds_its_restarts_in_place(tmp_path, content, env_count, want):
    environ = {**WORLD, "DPJOB_RESTART_COUNT": env_count}
    if content is not None:
        (tmp_path / "restart-count").write_text(content + "\n")
        environ["DPJOB_RESTART_COUNT_FILE"] = str(tmp_path / "restart-count")
    assert parse_env(environ).restart_count == want


def test_a_run_marks_itself_running_and_leaves_its_exit_code(tmp_path):
    environ = {"DPJOB_RESTART_COUNT_FILE": str(tmp_path / "restart-count")}
    (tmp_path / "trainer-exit").write_text("75\n")  # a previous run's record is not this run's
    mark_running(environ)
    assert (tmp_path / "trainer-running").exists() and not (tmp_path / "trainer-exit").exists()
    record_exit(3, environ)
    assert (tmp_path / "trainer-exit").read_text() == "3\n"


def test_without_the_variable_nothing_is_written_and_no_restart_is_counted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mark_running({})
    record_exit(1, {})
    assert list(tmp_path.iterdir()) == [] and restarts_in_place({}) == 0
