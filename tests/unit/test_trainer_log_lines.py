"""How the e2e tests read the trainer's JSON log lines out of ``kubectl logs``: every line the
trainer wrote is found, whatever the kubelet put before it on the same line."""

import pytest

from tests.support.realnode_jobs import _json_lines

START = '{"event": "start", "time": 1.0, "rank": 0}'


@pytest.mark.parametrize("text, events", [
    (START, ["start"]),
    (f"{START}\n{{\"event\": \"done\", \"rank\": 0}}", ["start", "done"]),
    (f"[W1207 07:04:20 socket.cpp:464] [c10d] waiting{START}", ["start"]),
    (f"[Gloo] Rank 0 is connected to {{3}} peers{START}", ["start"]),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\n{'a': 1}", []),
    ('{"rank": 0}', []),
    ("", []),
], ids=["one line", "two lines", "a partial stderr line before it", "braces in the text before it",
        "no JSON", "an object without an event", "empty"])
def test_each_logged_event_is_read_from_its_line(text, events):
    assert [item["event"] for item in _json_lines(text)] == events
