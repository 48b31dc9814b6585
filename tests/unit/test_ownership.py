"""Whose child object is it: the claim rule the executor applies to Services and ConfigMaps."""

from __future__ import annotations

import pytest

from dpjob_operator.reconcile.claims import FOREIGN, OURS, PREVIOUS, conflict_message, ownership

pytestmark = pytest.mark.unit

UID, NAME = "uid-train", "train"


def ref(uid: str, kind: str = "DataParallelJob", name: str = NAME, controller: bool | None = True) -> dict:
    r = {"apiVersion": "dpjob.io/v1alpha1", "kind": kind, "name": name, "uid": uid}
    if controller is not None:
        r["controller"] = controller
    return r


CASES = [
    ("ours", [ref(UID)], OURS),
    ("a previous job of the same name", [ref("uid-old")], PREVIOUS),
    ("another job", [ref("uid-x", name="other")], FOREIGN),
    ("another kind of the same name", [ref("uid-x", kind="Deployment")], FOREIGN),
    ("no owner", [], FOREIGN),
    ("our uid but not as controller", [ref(UID, controller=None)], FOREIGN),
    ("ours among other owners", [ref("uid-x", kind="Foo", controller=False), ref(UID)], OURS),
]


@pytest.mark.parametrize(("refs", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ownership_is_decided_by_the_controller_uid(refs, expected):
    assert ownership({"name": "train", "ownerReferences": refs}, UID, NAME) == expected


def test_the_conflict_message_names_the_object_and_its_controller():
    meta = {"namespace": "ns", "name": "train", "ownerReferences": [ref("uid-x", kind="Deployment", name="web")]}
    message = conflict_message("Service", meta)
    assert "Service ns/train" in message and "Deployment/web" in message and "never adopts" in message
    assert "controller: nobody" in conflict_message("ConfigMap", {"namespace": "ns", "name": "train-ranktable"})
