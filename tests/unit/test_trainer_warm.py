"""Warm restarts (dpjob_trainer/warm.py, handshake.py): which exits restart warm, how the ranks of
one gang find each other and only each other, who is blamed, and two real trainer processes on this
host that lose a rank's training process and finish with identical parameters in the same
containers' processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpjob_trainer.handshake import GangMovedOn, WarmCause, blame, gather, join, order
from dpjob_trainer.warm import Supervisor, WarmPolicy, exit_code, parse_exits, warm_policy
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waits import TimedOut, wait_until

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("environ, metrics_port, want", [
    ({}, 9090, None),                                                   # not asked for
    ({"DPJOB_WARM_RESTARTS": "0"}, 9090, None),                         # no budget
    ({"DPJOB_WARM_RESTARTS": "3"}, 0, None),                            # metrics off: the operator could not count
    ({"DPJOB_WARM_RESTARTS": "x"}, 9090, None),                         # unreadable: off, never a crash
    ({"DPJOB_WARM_RESTARTS": "3"}, 9090, WarmPolicy(3, None)),          # OnFailure: any non-zero exit
    ({"DPJOB_WARM_RESTARTS": "2", "DPJOB_WARM_RESTART_EXITS": "75,128-130"}, 9090,
     WarmPolicy(2, frozenset({75, 128, 129, 130}))),                    # ExitCode: the job's retriable codes
])
def test_warm_restarts_are_on_only_when_asked_with_a_budget_and_metrics(environ, metrics_port, want):
    assert warm_policy(environ, metrics_port) == want


@pytest.mark.parametrize("exits, code, retriable", [
    ("nonzero", 1, True), ("nonzero", 0, False), ("75,128-255", 75, True), ("75,128-255", 137, True),
    ("75,128-255", 3, False), ("75,128-255", 0, False),
])
def test_only_retriable_exits_restart_warm(exits, code, retriable):
    assert WarmPolicy(1, parse_exits(exits)).retriable(code) is retriable


def test_a_killed_process_has_the_shells_exit_code():
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert exit_code(status) == 137


def _supervise(codes: list[int], budget: int, exits: str = "nonzero") -> tuple[int, int]:
    """Supervise forked processes that exit with ``codes`` in turn: (final code, warm restarts made)."""
    sup: Supervisor = Supervisor(WarmPolicy(budget, parse_exits(exits)), lambda: codes[sup.restarts],
                                 say=lambda _: None)
    try:
        return sup.run(), sup.restarts
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("codes, budget, exits, want", [
    ([0], 3, "nonzero", (0, 0)),                  # a clean end ends the supervisor
    ([75, 0], 3, "nonzero", (0, 1)),              # a lost peer: restarted warm, then done
    ([137, 75, 0], 3, "75,128-255", (0, 2)),      # killed, then a lost peer
    ([75, 75, 75], 2, "nonzero", (75, 2)),        # the budget spent: the kubelet takes over
    ([3], 3, "75,128-255", (3, 0)),               # a permanent code never restarts warm
])
def test_the_supervisor_restarts_warm_within_its_budget(codes, budget, exits, want):
    assert _supervise(codes, budget, exits) == want


class DictStore:
    """The three calls of torch's TCPStore the handshake makes, on a dict (one thread: a missing key
    is an error here, where the real store would block until it is set)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def delete_key(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    def wait(self, keys: list[str], timeout: object) -> None:
        if any(key not in self.data for key in keys):
            raise RuntimeError("Wait timeout")


@pytest.mark.parametrize("rank0, rank1, want", [
    ("0.1", "0.1", True),                 # the same gang: joined
    ("0.0", "0.1", False),                # rank 0 of the previous gang, not yet gone: wait
    ("1.0", "0.1", GangMovedOn),          # rank 0's container was restarted: this one must restart too
    ("0.2", "0.1", GangMovedOn),          # rank 0 restarted twice: catch up through a container restart
])
def test_a_rank_joins_only_the_gang_of_its_own_generation(rank0, rank1, want):
    store = DictStore()
    store.set("dpjob/generation", rank0)
    if want is GangMovedOn:
        with pytest.raises(GangMovedOn):
            join(store, 1, rank1, "")
    else:
        assert join(store, 1, rank1, "") is want


def test_rank_0_ends_its_gang_when_another_rank_runs_a_newer_one():
    store = DictStore()
    join_store = DictStore()
    join_store.set("dpjob/generation", "1.0")
    join(join_store, 1, "1.0", "")  # rank 1 restarted by the kubelet: generation 1.0
    store.data.update({k: v for k, v in join_store.data.items() if k.startswith("dpjob/joined")})
    with pytest.raises(GangMovedOn):
        gather(store, 2, "0.1", "")  # rank 0 restarted warm


def test_rank_0_gathers_every_ranks_previous_exit_and_blames_the_first_real_failure():
    store = DictStore()
    for rank, previous in ((1, "137 100.5"), (2, "75 100.9")):
        store.set(f"dpjob/previous/{rank}", previous)
        store.set(f"dpjob/joined/{rank}", "0.1")
    exits = gather(store, 3, "0.1", "75 100.7")
    assert exits == ["75 100.7", "137 100.5", "75 100.9"]
    assert blame(exits) == WarmCause(rank=1, exit_code=137, failed_at=100.5)


def test_rank_0_of_a_warm_gang_ends_it_when_a_rank_does_not_join_in_time():
    """A rank whose old process never noticed the failure: rank 0 gives up after the follow time and
    its container restarts, instead of waiting for ever."""
    store = DictStore()
    store.set("dpjob/joined/1", "0.1")
    store.set("dpjob/previous/1", "137 10")
    with pytest.raises(GangMovedOn, match=r"rank 2 did not join gang 0\.1 within 30s"):
        gather(store, 3, "0.1", "75 11", follow_seconds=30.0)


@pytest.mark.parametrize("exits, want", [
    (["75 10", "75 9"], WarmCause(1, 75, 9.0)),            # only bystanders: the earliest
    (["75 9", "137 10"], WarmCause(1, 137, 10.0)),         # a real failure before a lost peer, even if later
    (["", ""], None),                                      # a first start: nobody to blame
])
def test_blame(exits, want):
    assert blame(exits) == want


def test_generations_order_by_pod_generation_then_warm_restarts():
    assert order("1.0") > order("0.5") > order("0.1") > order("0.0")


def _wait_for_a_checkpoint(procs: list[subprocess.Popen], ckpt: Path, errs: list[Path]) -> None:
    """Two torch imports at nice 10 beside the cluster's tests can take a minute or more: the
    deadline is generous, and a rank that ends before the checkpoint fails the test at once. Either
    failure shows the ranks' stderr."""
    try:
        wait_until(lambda: any(p.poll() is not None for p in procs) or (ckpt.exists() and any(ckpt.iterdir())),
                   timeout=300, interval=0.1, what="a checkpoint")
    except TimedOut as e:
        raise AssertionError(f"{e}\n{_tails(errs)}") from None
    assert all(p.poll() is None for p in procs), f"a rank ended before its first checkpoint:\n{_tails(errs)}"


def _tails(paths: list[Path]) -> str:
    """The end of each rank's stderr, for a failure message."""
    return "\n".join(f"--- {path.name}:\n{path.read_text()[-2000:]}" for path in paths if path.exists())


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def test_two_ranks_lose_a_training_process_restart_warm_and_finish_identical(tmp_path):
    """Real processes: rank 1's training process is SIGKILLed after a checkpoint; its supervisor
    forks a new one, rank 0's loses its peer and is restarted warm too, and the gang resumes from
    the checkpoint and ends with identical parameters. Neither supervisor (the container's process)
    ends until the work is done."""
    master, metrics = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer-image"), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master), "DPJOB_BACKEND": "gloo",
           "DPJOB_WARM_RESTARTS": "2", "DPJOB_WARM_RESTART_EXITS": "75,128-255", "OMP_NUM_THREADS": "1",
           "DPJOB_WARM_RECORD_FILE": str(tmp_path / "termination-log")}
    (tmp_path / "termination-log").touch()
    args = ["--task", "mlp", "--steps", "400", "--checkpoint-every", "20", "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--report", str(tmp_path / "report"), "--log-every", "20", "--metrics-port", str(metrics)]
    out_paths, err_paths = [tmp_path / f"rank{r}.out" for r in (0, 1)], [tmp_path / f"rank{r}.err" for r in (0, 1)]
    procs = []
    for r in (0, 1):
        with out_paths[r].open("w") as out, err_paths[r].open("w") as err:
            procs.append(subprocess.Popen([sys.executable, "-m", "dpjob_trainer", *args],
                                          env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=out, stderr=err))
    try:
        _wait_for_a_checkpoint(procs, tmp_path / "ckpt", err_paths)
        (worker,) = wait_until(lambda: _children(procs[1].pid), timeout=60, what="rank 1's training process")
        killed_at = time.time()
        os.kill(worker, signal.SIGKILL)
        for p in procs:
            p.wait(timeout=180)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{e}\n{_tails(err_paths)}") from None
    finally:
        for p in procs:
            p.kill()
    outs = [(out.read_text(), err.read_text()) for out, err in zip(out_paths, err_paths, strict=True)]
    assert [p.returncode for p in procs] == [0, 0], _tails(err_paths)
    events = [[json.loads(line) for line in out.splitlines() if line.startswith("{")] for out, _ in outs]
    starts = [[e for e in ev if e["event"] == "start"] for ev in events]
    assert [[s["warm_restart"] for s in st] for st in starts] == [[0, 1], [0, 1]], starts
    assert all(st[-1]["start_step"] > 0 for st in starts), "the restarted gang did not resume from the checkpoint"
    (cause,) = [e for e in events[0] if e["event"] == "warm_restart"]
    assert (cause["failed_rank"], cause["exit_code"]) == (1, 137), cause
    assert abs(cause["failed_at"] - killed_at) < 5, (cause, killed_at)
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "report").glob("report-rank*.json"))]
    assert len({r["param_sha256"] for r in reports}) == 1 and all(r["steps"] == 400 for r in reports), reports
    assert "warm restart 1 of 2" in outs[1][1]
    record = (tmp_path / "termination-log").read_text()  # rank 0's, for the operator (api/warm_record.py)
    assert record.startswith("dpjob-trainer: warm restarts 1; rank 1 exit 137 at "), record
    assert "; stepped at " in record


def test_a_killed_supervisor_takes_its_training_process_with_it(tmp_path):
    """Run by hand (no container to end them together), a SIGKILLed supervisor leaves no training
    process behind."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer-image"), "DPJOB_WARM_RESTARTS": "1",
           "DPJOB_BACKEND": "gloo", "OMP_NUM_THREADS": "1"}
    sup = subprocess.Popen([sys.executable, "-m", "dpjob_trainer", "--task", "mlp", "--steps", "100000",
                            "--log-every", "0", "--metrics-port", str(free_port())], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        (worker,) = wait_until(lambda: _children(sup.pid), timeout=60, what="the training process")
    finally:
        sup.kill()
        sup.wait(timeout=30)
    wait_until(lambda: not Path(f"/proc/{worker}").exists() or "Z" in _state(worker), timeout=60,
               what="the training process to end with its supervisor")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
