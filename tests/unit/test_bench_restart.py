"""The restart benchmark's pure parts: when a rank stepped again (from the trainer's own log lines),
the table of medians and ratios, and the status it writes on kwok in the kubelet's place, as the
operator reads it."""

from __future__ import annotations

import pytest

from bench.restart_kwok import in_place_status
from bench.restart_report import markdown, recovery, resumed_at, running_again, summarize
from dpjob_operator.api.observed import observe_pod

pytestmark = pytest.mark.unit

KILL = 1000.0


def _log(*events: tuple[str, float, dict]) -> list[dict]:
    return [{"event": event, "time": t, "rank": 1, **fields} for event, t, fields in events]


def test_the_first_step_of_the_new_generation_counts_not_a_late_step_of_the_old_one():
    log = _log(("step", 1000.2, {"step": 14}),                          # the old gang, after the kill
               ("start", 1003.0, {"restart_count": 1, "start_step": 10}),
               ("checkpoint", 1003.1, {"step": 10}),
               ("step", 1003.4, {"step": 11}),
               ("step", 1003.5, {"step": 12}))
    assert resumed_at(log, generation=1) == 1003.4


def test_a_rank_that_has_not_restarted_yet_has_not_resumed():
    old = _log(("start", 990.0, {"restart_count": 0, "start_step": 0}), ("step", 1000.1, {"step": 14}))
    assert resumed_at(old, generation=1) is None
    started = _log(("start", 1003.0, {"restart_count": 1}))                # started, no step yet
    assert resumed_at(started, generation=1) is None
    assert resumed_at([{"event": "step", "time": 1001.0, "step": 3}], generation=1) is None


def test_recovery_waits_for_the_last_rank():
    assert recovery({0: 1003.4, 1: None}, KILL) is None
    assert recovery({0: 1003.4, 1: 1005.25}, KILL) == 5.25
    assert recovery({}, KILL) is None


def test_a_warm_restart_is_the_next_generation_too():
    log = _log(("start", 990.0, {"restart_count": 0, "warm_restart": 0}), ("step", 1000.1, {"step": 14}),
               ("start", 1000.4, {"restart_count": 0, "warm_restart": 1}), ("step", 1000.9, {"step": 11}))
    assert resumed_at(log, generation=1) == 1000.9


def test_the_job_is_running_again_only_with_a_restart_counted():
    assert not running_again({"phase": "Running", "restarts": 0, "failureRestarts": 0})
    assert not running_again({"phase": "Restarting", "restarts": 1, "failureRestarts": 1})
    assert running_again({"phase": "Running", "restarts": 1, "failureRestarts": 1})
    assert running_again({"phase": "Running", "restarts": 0, "failureRestarts": 1}), "a warm restart"


def _rows() -> list[dict]:
    rows = []
    for rep, (inplace, recreate) in enumerate(((2.0, 10.0), (3.0, 12.0), (4.0, 14.0))):
        rows += [{"ranks": 2, "strategy": "Warm", "rep": rep, "recover_s": inplace / 2, "api_requests": 4.0,
                  "operator_calls": {"PATCH 200": 2.0, "GET 200": 2.0}},
                 {"ranks": 2, "strategy": "InPlace", "rep": rep, "recover_s": inplace, "api_requests": 6.0,
                  "operator_calls": {"PATCH 200": 3.0, "GET 200": 3.0}},
                 {"ranks": 2, "strategy": "Recreate", "rep": rep, "recover_s": recreate, "api_requests": 14.0,
                  "operator_calls": {"DELETE 200": 2.0, "POST 201": 2.0 + rep, "PATCH 200": 4.0, "GET 200": 5.0}}]
    rows += [{"ranks": 4, "strategy": "InPlace", "rep": 0, "recover_s": 3.0, "api_requests": 7.0},
             {"ranks": 4, "strategy": "InPlace", "rep": 1, "error": "timed out"},
             {"ranks": 4, "strategy": "Recreate", "rep": 0, "recover_s": 15.0, "api_requests": 20.0}]
    return rows


def test_the_table_has_medians_the_ratio_and_requests_per_strategy():
    table = markdown(summarize(_rows(), "recover_s"), "caption", ["a note"]).splitlines()
    header, _, *rows = table[2:table.index("", 2)]
    assert rows[0] == ("| 2 | 1.50 (1.00-2.00) | 3.00 (2.00-4.00) | 12.00 (10.00-14.00) | 8.00x | 4.00x "
                       "| 4 / 6 / 14 | 2 / 3 / 9 (8-10) |"), rows[0]
    assert rows[1] == "| 4 | - | 3.00, 1 missing | 15.00 | - | 5.00x | - / 7, 1 missing / 20 | - / - / - |", rows[1]
    assert header.startswith("| ranks | Warm median s | InPlace median s | Recreate median s | Recreate/Warm "
                             "| Recreate/InPlace |")
    assert len(rows) == 2 and all(line.count("|") == header.count("|") for line in rows)
    calls = next(line for line in table if line.startswith("| 2 | Recreate |"))
    assert calls == "| 2 | Recreate | GET 200: 5, PATCH 200: 4, POST 201: 3, DELETE 200: 2 |"
    assert table[-1] == "- a note"


def _kwok_pod(rank: int) -> dict:
    """A rank pod that restarts in place as kwok's pod-ready stage left it: Running, nothing restarted."""
    now = "2026-01-01T00:00:00Z"
    return {"metadata": {"name": f"k-rank-{rank}", "uid": f"u{rank}",
                         "labels": {"dpjob.io/rank": str(rank), "dpjob.io/restart": "0"}},
            "spec": {"nodeName": "bench-cpu-0"},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "trainer", "image": "bench", "ready": True, "restartCount": 0,
                                              "state": {"running": {"startedAt": now}}}],
                       "initContainerStatuses": [{"name": "dpjob-restart-count", "image": "bench", "ready": True,
                                                  "restartCount": 0, "state": {"terminated": {
                                                      "exitCode": 0, "reason": "Completed"}}}]}}


@pytest.mark.parametrize("previous_exit", [137, 75])
def test_the_kwok_status_reads_to_the_operator_as_a_restart_in_place(previous_exit):
    pod = _kwok_pod(1)
    patch = in_place_status(pod["status"], previous_exit, "2026-01-01T00:01:00Z")
    seen = observe_pod({**pod, "status": {**pod["status"], **patch["status"]}})
    assert seen is not None and seen.phase == "Running"
    assert (seen.in_place, seen.in_place_exit, seen.gang_generation) == (1, previous_exit, 1)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, "the pod read was changed"
    twice = in_place_status({**pod["status"], **patch["status"]}, 75, "2026-01-01T00:02:00Z")
    assert twice["status"]["containerStatuses"][0]["restartCount"] == 2
    assert "podIP" not in patch["status"], "the patch must leave podIP alone (kwok's pod-ready matches without one)"
