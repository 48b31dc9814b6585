"""Which job body the controller holds for a name as events arrive out of order
(api/event_order.py): a job deleted and applied again at once must never be lost."""

from __future__ import annotations

import pytest

from dpjob_operator.api.event_order import FORGET_JOB, FORGET_UID, IGNORE, STORE, on_job_event

pytestmark = pytest.mark.unit


def _job(uid: str, rv: int) -> dict:
    return {"metadata": {"name": "train", "namespace": "ns", "uid": uid, "resourceVersion": str(rv)}}


OLD, NEW = "old-uid", "new-uid"


@pytest.mark.parametrize(("event", "held", "body", "verdict"), [
    ("ADDED", None, _job(NEW, 10), STORE),                        # first sight
    ("MODIFIED", _job(NEW, 10), _job(NEW, 12), STORE),            # a newer version
    ("MODIFIED", _job(NEW, 12), _job(NEW, 11), IGNORE),           # our status patch's answer came first
    ("MODIFIED", _job(NEW, 12), _job(NEW, 12), IGNORE),           # the watch brings what we hold: no pass
    ("MODIFIED", {"metadata": {"uid": NEW}}, {"metadata": {"uid": NEW}}, STORE),  # no version to compare
    ("DELETED", _job(NEW, 12), _job(NEW, 13), FORGET_JOB),        # the job is gone
    ("DELETED", None, _job(NEW, 13), FORGET_JOB),                 # gone before we held it
    # Deleted and applied again at once: the new job's ADDED came before the old job's last events.
    ("DELETED", _job(NEW, 20), _job(OLD, 19), FORGET_UID),        # keep the new job, drop the old one's memos
    ("MODIFIED", _job(NEW, 20), _job(OLD, 18), IGNORE),           # the old job's late update: not held again
    # In order: the old job is held when its DELETED comes, the new job's ADDED follows.
    ("DELETED", _job(OLD, 18), _job(OLD, 19), FORGET_JOB),
    ("ADDED", _job(OLD, 18), _job(NEW, 20), STORE),               # the old one's DELETED is still to come
])
def test_a_name_holds_the_newest_job(event, held, body, verdict):
    assert on_job_event(event, held, body) == verdict
