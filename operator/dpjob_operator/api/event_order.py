"""Which job body the controller holds for a name, as the job watch and its relists report.

The job watch (``controller/jobcache.py``, a reflector like the pods') delivers one namespace's
events in resourceVersion order. One other writer races it: the controller's own status patch is
answered before the watch delivers it, so the controller may hold a version newer than the event
that follows. The resourceVersion orders them (versions of one resource are comparable, KEP-5504;
the controller compares them only within one name).

An event of the very version held (the watch delivering our own status patch, or a relist of a job
that did not change) says nothing new and starts no pass: client-go's controllers return early on
an update whose ResourceVersion did not change. Otherwise every status write would be followed by a
pass that finds nothing to do.

A relist replaces what a namespace holds (client-go's ``Replace``): a job that is not in the list,
or is there under another uid (deleted and created again while no watch ran), was deleted in the
gap and is forgotten, as a DELETED event would have done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

STORE = "store"            # hold this body and work the job
IGNORE = "ignore"          # not newer than what is held: nothing to do
FORGET_JOB = "forget-job"  # the job is gone: drop the name and every memo of it

JobKey = tuple[str, str]


def resource_version(body: Mapping[str, Any] | None) -> int:
    try:
        return int(((body or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def uid(body: Mapping[str, Any] | None) -> str:
    return str(((body or {}).get("metadata") or {}).get("uid") or "")


def job_key(body: Mapping[str, Any]) -> JobKey:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def on_job_event(event_type: str | None, held: Mapping[str, Any] | None, body: Mapping[str, Any]) -> str:
    """What an event with ``body`` does, given the body ``held`` for its name (None: nothing)."""
    if event_type == "DELETED":
        return FORGET_JOB
    newer = held is None or resource_version(body) == 0 or resource_version(body) > resource_version(held)
    return STORE if newer else IGNORE


def vanished(held: Mapping[JobKey, Mapping[str, Any]], namespace: str | None,
             listed: Iterable[Mapping[str, Any]]) -> list[tuple[JobKey, str]]:
    """(key, uid) of every held job of ``namespace`` (None: every namespace) that a fresh list of it
    no longer has, or has under another uid."""
    live = {job_key(body): uid(body) for body in listed}
    return sorted((key, uid(body)) for key, body in held.items()
                  if (namespace is None or key[0] == namespace) and live.get(key) != uid(body))
