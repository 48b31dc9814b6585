"""Which job body the controller holds for a name, as watch events arrive.

Two writers make events arrive out of order for one name. The controller's own status patch is
answered before the watch delivers it (the answer is newer than the event that follows). And kopf
works each object (uid) on its own task, so a job deleted and applied again at once may show the
new job before the old one's last events, its DELETED included: dropping the name on that DELETED
would lose the new job until something else touched it (it would never start).

The resourceVersion orders them: a name can be created again only after the old object is gone,
so every event of the old object is older than the new one's creation. Versions of one resource
are comparable (KEP-5504); the controller compares them only within one name.

An event of the very version held (the watch delivering our own status patch, whose answer the
controller already holds, or a relist) says nothing new and starts no pass: client-go's
controllers return early on an update whose ResourceVersion did not change. Otherwise every
status write would be followed by a pass that finds nothing to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STORE = "store"            # hold this body and work the job
IGNORE = "ignore"          # older than what is held: nothing to do
FORGET_JOB = "forget-job"  # the job is gone: drop the name and every memo of it
FORGET_UID = "forget-uid"  # an old job of this name is gone: drop its memos, keep the newer job


def resource_version(body: Mapping[str, Any] | None) -> int:
    try:
        return int(((body or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def uid(body: Mapping[str, Any] | None) -> str:
    return str(((body or {}).get("metadata") or {}).get("uid") or "")


def on_job_event(event_type: str | None, held: Mapping[str, Any] | None, body: Mapping[str, Any]) -> str:
    """What an event with ``body`` does, given the body ``held`` for its name (None: nothing)."""
    older = held is not None and resource_version(held) > resource_version(body)
    if event_type == "DELETED":
        return FORGET_UID if older and uid(held) != uid(body) else FORGET_JOB
    same = held is not None and resource_version(body) > 0 and resource_version(held) == resource_version(body)
    return IGNORE if older or same else STORE
