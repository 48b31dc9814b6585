"""wait_for_rank_table: returns once the operator marks the table completed, else a clear timeout."""

from __future__ import annotations

import json

import pytest

from dpjob_trainer.ranktable import (
    RankTableTimeout,
    must_wait_for_rank_table,
    read_rank_table_status,
    wait_for_rank_table,
)

pytestmark = pytest.mark.unit


class FakeTime:
    """A clock that only moves when the code sleeps; ``on_sleep`` lets a test change the file."""

    def __init__(self, on_sleep=None):
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(self.now)


def write(path, content):
    path.write_text(content if isinstance(content, str) else json.dumps(content))


def test_returns_the_table_once_it_is_completed(tmp_path):
    path = tmp_path / "ranktable.json"
    completed = {"status": "completed", "version": "1.0", "server_count": "1", "server_list": []}
    # The kubelet updates the mounted ConfigMap asynchronously: missing, then partial, then filled.
    timeline = {1.0: '{"status": "initializing"}', 2.0: '{"status": "compl', 3.0: completed}

    def on_sleep(now):
        if now in timeline:
            write(path, timeline[now])

    fake = FakeTime(on_sleep)
    told: list[str | None] = []
    table = wait_for_rank_table(str(path), timeout=10, poll=1.0, clock=fake.clock, sleep=fake.sleep,
                                waiting=told.append)
    assert table == completed
    assert fake.now == 3.0 and fake.sleeps == [1.0, 1.0, 1.0]
    assert told == ["<file missing>"], "a waiting rank says so once, with what it read first"


def test_already_completed_table_returns_without_sleeping(tmp_path):
    path = tmp_path / "rt.json"
    write(path, {"status": "completed"})
    fake = FakeTime()
    assert wait_for_rank_table(str(path), timeout=0, clock=fake.clock, sleep=fake.sleep)["status"] == "completed"
    assert fake.sleeps == []


def test_timeout_names_the_file_and_the_last_status_seen(tmp_path):
    path = tmp_path / "rt.json"
    write(path, {"status": "initializing"})
    fake = FakeTime()
    with pytest.raises(RankTableTimeout) as err:
        wait_for_rank_table(str(path), timeout=5, poll=2.0, clock=fake.clock, sleep=fake.sleep)
    message = str(err.value)
    assert str(path) in message and "'initializing'" in message and "5s" in message
    assert fake.now == pytest.approx(5.0)  # never sleeps past the deadline
    assert fake.sleeps == [2.0, 2.0, 1.0]


def test_missing_file_is_reported_as_such_on_timeout(tmp_path):
    fake = FakeTime()
    with pytest.raises(RankTableTimeout, match="file missing"):
        wait_for_rank_table(str(tmp_path / "absent.json"), timeout=1, clock=fake.clock, sleep=fake.sleep)


def test_real_clock_small_timeout(tmp_path):
    path = tmp_path / "rt.json"
    write(path, {"status": "initializing"})
    with pytest.raises(RankTableTimeout):
        wait_for_rank_table(str(path), timeout=0.05, poll=0.01)


@pytest.mark.parametrize(
    ("content", "status"),
    [
        ('{"status": "completed"}', "completed"),
        ('{"status": "initializing"}', "initializing"),
        ('{"ranks": []}', "<no status field>"),
        ("[1, 2]", "<not a JSON object>"),
        ('{"status": ', "<not valid JSON yet>"),
    ],
)
def test_status_reading(tmp_path, content, status):
    path = tmp_path / "rt.json"
    path.write_text(content)
    assert read_rank_table_status(str(path))[0] == status


@pytest.mark.parametrize("backend,policy,waits", [
    ("hccl", "auto", True),      # HCCL reads the table during communicator init
    ("gloo", "auto", False),     # torch rendezvous at MASTER_ADDR: waiting would cost a kubelet sync (~1 min)
    ("nccl", "auto", False),
    (None, "auto", False),
    ("gloo", "always", True),    # a user's own script that reads the table
    ("hccl", "never", False),
])
def test_the_trainer_waits_for_the_rank_table_only_when_its_backend_reads_it(backend, policy, waits):
    assert must_wait_for_rank_table(backend, policy) is waits


def test_an_unknown_wait_policy_is_an_error():
    with pytest.raises(ValueError, match="auto, always or never"):
        must_wait_for_rank_table("gloo", "sometimes")
