"""Which job body the controller holds for a name as the job watch and its relists report
(api/event_order.py): our own status write's answer is never replaced by an older event, and a
relist forgets the jobs deleted while no watch ran."""

from __future__ import annotations

import pytest

from dpjob_operator.api.event_order import FORGET_JOB, IGNORE, STORE, job_key, on_job_event, vanished

pytestmark = pytest.mark.unit


def _job(uid: str, rv: int, name: str = "train", namespace: str = "ns") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(rv)}}


OLD, NEW = "old-uid", "new-uid"


@pytest.mark.parametrize(("event", "held", "body", "verdict"), [
    ("ADDED", None, _job(NEW, 10), STORE),                        # first sight
    ("MODIFIED", _job(NEW, 10), _job(NEW, 12), STORE),            # a newer version
    ("MODIFIED", _job(NEW, 12), _job(NEW, 11), IGNORE),           # our status patch's answer came first
    ("MODIFIED", _job(NEW, 12), _job(NEW, 12), IGNORE),           # the watch brings what we hold: no pass
    ("ADDED", _job(NEW, 12), _job(NEW, 12), IGNORE),              # a relist of a job that did not change
    ("MODIFIED", {"metadata": {"uid": NEW}}, {"metadata": {"uid": NEW}}, STORE),  # no version to compare
    ("DELETED", _job(NEW, 12), _job(NEW, 13), FORGET_JOB),        # the job is gone
    ("DELETED", None, _job(NEW, 13), FORGET_JOB),                 # gone before we held it
    ("ADDED", _job(OLD, 18), _job(NEW, 20), STORE),               # deleted and applied again: the new job
])
def test_a_name_holds_the_newest_job(event, held, body, verdict):
    assert on_job_event(event, held, body) == verdict


def _held(*bodies: dict) -> dict:
    return {job_key(b): b for b in bodies}


@pytest.mark.parametrize(("held", "namespace", "listed", "gone"), [
    (_held(_job("a", 1, "kept")), "ns", [_job("a", 5, "kept")], []),                    # still there (changed)
    (_held(_job("a", 1, "gone")), "ns", [], [(("ns", "gone"), "a")]),                   # deleted in the gap
    (_held(_job("a", 1, "again")), "ns", [_job("b", 9, "again")], [(("ns", "again"), "a")]),  # and re-created
    (_held(_job("a", 1, "other", "elsewhere")), "ns", [], []),                          # another namespace's list
    (_held(_job("a", 1, "x", "one"), _job("b", 1, "y", "two")), None, [_job("b", 1, "y", "two")],
     [(("one", "x"), "a")]),                                                            # an all-namespaces list
])
def test_a_relist_forgets_what_was_deleted_while_no_watch_ran(held, namespace, listed, gone):
    assert vanished(held, namespace, listed) == gone
