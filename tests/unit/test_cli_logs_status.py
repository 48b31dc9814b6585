"""Merged rank logs across gang restarts, and what `dpjob status` / `dpjob list` show. No cluster: the
follower reads from an in-memory log source whose pods change between polls like a real gang's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.log_options import WHOLE_LOG, LogOptions
from dpjob_cli.logs import LogFollower, pods_to_follow, read_logs, select_pods
from dpjob_cli.status import age, failure_summary, list_row, render_status, status_view

pytestmark = pytest.mark.unit


def pod(rank: int, restart: int = 0, state: str = "running", job: str = "train", exit_code: int = 0,
        deleting: bool = False, restarted_in_place: int = 0) -> dict[str, Any]:
    states = {"running": {"running": {}}, "terminated": {"terminated": {"exitCode": exit_code, "reason": "Error"
                                                                       if exit_code else "Completed"}},
              "waiting": {"waiting": {"reason": "ContainerCreating"}}}
    meta: dict[str, Any] = {"name": f"{job}-rank-{rank}", "uid": f"uid-{restart}-{rank}",
                            "labels": {"dpjob.io/job-name": job, "dpjob.io/rank": str(rank),
                                       "dpjob.io/restart": str(restart)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    phase = {"running": "Running", "waiting": "Pending", "terminated": "Failed" if exit_code else "Succeeded"}[state]
    return {"metadata": meta, "spec": {"nodeName": "real-0"},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "trainer", "state": states[state], "restartCount": restarted_in_place,
                 **({"lastState": {"terminated": {"exitCode": 137}}} if restarted_in_place else {})}]}}


class FakeSource:
    """Pods per poll (the last list repeats) and each pod's log lines, keyed by pod uid; remembers the
    options each read and stream asked for, by pod uid."""

    def __init__(self, polls: list[list[dict[str, Any]]], logs: dict[str, list[str]]) -> None:
        self.polls, self.logs, self.uid_of = polls, logs, {}
        self.asked: dict[str, LogOptions] = {}

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        pods = self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]
        self.uid_of.update({p["metadata"]["name"]: p["metadata"]["uid"] for p in pods})
        return pods

    def read_log(self, namespace: str, pod: str, container: str, options: LogOptions = WHOLE_LOG) -> str:
        self.asked[self.uid_of[pod]] = options
        if options.previous and self.uid_of[pod] not in self.logs:
            raise CliError(ExitCode.API_ERROR, f'previous terminated container "trainer" in pod "{pod}" not found')
        return "\n".join(self.logs[self.uid_of[pod]]) + "\n"

    def stream_log(self, namespace: str, pod: str, container: str, options: LogOptions = WHOLE_LOG) -> Iterator[str]:
        self.asked[self.uid_of[pod]] = options
        yield from self.logs[self.uid_of[pod]]


def test_follow_merges_every_rank_with_a_prefix_and_picks_up_the_next_gang():
    first = [pod(0, 0), pod(1, 0, "terminated", exit_code=3)]
    second = [pod(0, 1), pod(1, 1)]
    source = FakeSource([[pod(0, 0, "waiting")], first, second],
                        {"uid-0-0": ["r0 starts"], "uid-0-1": ["r1 boom"], "uid-1-0": ["r0 again", "r0 done"],
                         "uid-1-1": ["r1 done"]})
    polls = iter([False, False, False, True])
    lines = list(LogFollower(source, "ns", "train", poll=0.1).lines(lambda: next(polls, True)))
    assert sorted(lines[:2]) == ["[rank 0] r0 starts", "[rank 1] r1 boom"]
    assert lines[2] == "[dpjob] gang restart 1: following the new rank pods"
    assert sorted(lines[3:]) == ["[rank 0] r0 again", "[rank 0] r0 done", "[rank 1] r1 done"]
    # each rank's own lines stay in order
    assert lines.index("[rank 0] r0 again") < lines.index("[rank 0] r0 done")


def test_follow_of_one_rank_shows_only_that_rank():
    source = FakeSource([[pod(0), pod(1)]], {"uid-0-0": ["zero"], "uid-0-1": ["one"]})
    finished = iter([False, True])
    assert list(LogFollower(source, "ns", "train", {1}, poll=0.01).lines(lambda: next(finished, True))) == \
        ["[rank 1] one"]


def test_pods_are_followed_once_started_and_once_per_uid():
    pods = [pod(1), pod(0, state="waiting"), pod(0, 1)]
    assert [p["metadata"]["uid"] for p in pods_to_follow(pods, set(), None)] == ["uid-0-1", "uid-1-0"]
    assert pods_to_follow(pods, {"uid-0-1", "uid-1-0"}, None) == []


def test_select_pods_keeps_the_newest_live_generation_in_rank_order():
    pods = [pod(1, 2), pod(0, 1, deleting=True), pod(0, 2), pod(1, 1, deleting=True)]
    assert [p["metadata"]["uid"] for p in select_pods(pods, None)] == ["uid-2-0", "uid-2-1"]


def test_logs_without_follow_prefix_only_when_several_ranks_are_shown():
    source = FakeSource([[pod(0), pod(1), pod(2, state="waiting")]], {"uid-0-0": ["a"], "uid-0-1": ["b"]})
    assert read_logs(source, "ns", "train", {1}, prefix=False) == ["b"]
    assert read_logs(source, "ns", "train", None, prefix=True) == ["[rank 0] a", "[rank 1] b",
                                                                    "[dpjob] rank 2 has not started yet"]
    with pytest.raises(CliError) as err:
        read_logs(source, "ns", "train", {7}, prefix=False)
    assert err.value.code == ExitCode.NOT_FOUND and "rank 7" in err.value.message


def test_previous_reads_the_ranks_that_restarted_in_place_and_says_which_did_not():
    pods = [pod(0, restarted_in_place=1), pod(1), pod(2, restarted_in_place=2)]
    source = FakeSource([pods], {"uid-0-0": ["r0 before the restart"]})  # rank 2's ended instance is gone
    previous = LogOptions(previous=True, tail=5)
    assert read_logs(source, "ns", "train", None, prefix=True, options=previous) == [
        "[rank 0] r0 before the restart",
        "[dpjob] rank 1 has no previous trainer instance (it has not restarted in its pod)",
        '[dpjob] rank 2 has no previous trainer log: previous terminated container "trainer" in pod '
        '"train-rank-2" not found']
    assert source.asked["uid-0-0"] == previous and "uid-0-1" not in source.asked


class RefusingSource(FakeSource):
    def read_log(self, namespace: str, pod: str, container: str, options: LogOptions = WHOLE_LOG) -> str:
        raise CliError(ExitCode.API_ERROR, "API server error 500 on pod train-rank-0")


def test_a_failing_read_of_the_current_instance_still_fails_the_command():
    with pytest.raises(CliError, match="error 500"):
        read_logs(RefusingSource([[pod(0)]], {}), "ns", "train", {0}, prefix=False, options=LogOptions(tail=3))


def test_follow_applies_tail_and_since_to_the_running_containers_and_reads_later_ones_whole():
    source = FakeSource([[pod(0), pod(1, state="waiting")], [pod(0), pod(1)]], {"uid-0-0": ["a"], "uid-0-1": ["b"]})
    finished = iter([False, False, True])
    options = LogOptions(tail=10, since_seconds=60, timestamps=True)
    lines = list(LogFollower(source, "ns", "train", poll=0.01, options=options).lines(lambda: next(finished, True)))
    assert sorted(lines) == ["[rank 0] a", "[rank 1] b"]
    assert source.asked == {"uid-0-0": options, "uid-0-1": LogOptions(timestamps=True)}


def test_a_follower_refuses_the_previous_instance():
    with pytest.raises(ValueError, match="previous"):
        LogFollower(FakeSource([[]], {}), "ns", "train", options=LogOptions(previous=True))


FAILED = {"metadata": {"name": "train", "namespace": "ns", "creationTimestamp": "2026-11-23T10:00:00Z"},
          "spec": {"replicas": 2, "accelerator": "cpu", "runPolicy": {"backoffLimit": 0}},
          "status": {"phase": "Failed", "reason": "BackoffLimitExceeded", "message": "rank 1 failed; no restarts left",
                     "ready": "0/2", "worldSize": 2, "restarts": 0,
                     "lastFailure": {"rank": 1, "pod": "train-rank-1", "exitCode": 3, "reason": "Error",
                                     "restart": 0},
                     "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                     "message": "rank 1 failed"}]}}


def test_failure_summary_names_the_failing_rank_its_pod_and_exit_code():
    summary = failure_summary(FAILED)
    assert summary.startswith("rank 1 (train-rank-1) failed with exit code 3: Error")
    assert "BackoffLimitExceeded: rank 1 failed; no restarts left" in summary


def test_status_view_and_its_text_show_phase_conditions_ranks_and_progress():
    pods = [pod(1, state="terminated", exit_code=3), pod(0, state="terminated")]
    job = {**FAILED, "status": {**FAILED["status"], "progress": {"step": 120, "summary": "step 120", "loss": 0.25}}}
    view = status_view(job, pods)
    assert [(r["rank"], r["state"], r["exitCode"]) for r in view["ranks"]] == [
        (0, "exited 0 (Completed)", 0), (1, "exited 3 (Error)", 3)]
    text = render_status(view)
    assert text.splitlines()[0].startswith("Job train (namespace ns): Failed   ready 0/2")
    assert "progress: step 120, loss 0.25" in text
    assert "last failure: rank 1 (train-rank-1) exit code 3 Error" in text
    assert "BackoffLimitExceeded" in text and "train-rank-1" in text


@pytest.mark.parametrize("seconds, text", [(5, "5s"), (59, "59s"), (60, "1m"), (7199, "119m"), (7200, "2h"),
                                           (3 * 86400, "3d")])
def test_age_reads_like_kubectl(seconds, text):
    now = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)
    then = datetime.fromtimestamp(now.timestamp() - seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert age(then, now) == text


def test_list_row_has_kubectl_get_dpj_columns():
    row = list_row(FAILED, datetime(2026, 11, 23, 10, 5, tzinfo=UTC))
    assert row == {"namespace": "ns", "name": "train", "phase": "Failed", "ready": "0/2", "world": 2,
                   "accelerator": "cpu", "restarts": 0, "progress": None, "eta": None, "age": "5m",
                   "reason": "BackoffLimitExceeded", "queue": None, "loss": None, "samplesPerSecond": None}
