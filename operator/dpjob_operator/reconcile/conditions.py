"""Kubernetes-style conditions: lastTransitionTime moves only when the status flips."""

from __future__ import annotations

from typing import Any


def set_condition(conditions: list[dict[str, Any]], type_: str, status: bool, reason: str, message: str,
                  now: str, generation: int) -> list[dict[str, Any]]:
    """Return a new list with condition ``type_`` set; order of first appearance is kept."""
    value = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") == type_:
            found = True
            moved = cond.get("status") != value
            out.append({"type": type_, "status": value, "reason": reason, "message": message,
                        "lastTransitionTime": now if moved else cond.get("lastTransitionTime", now),
                        "observedGeneration": generation})
        else:
            out.append(cond)
    if not found:
        out.append({"type": type_, "status": value, "reason": reason, "message": message,
                    "lastTransitionTime": now, "observedGeneration": generation})
    return out


def get_condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    return next((cd for cd in conditions if cd.get("type") == type_), None)


def is_true(conditions: list[dict[str, Any]], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return bool(cond and cond.get("status") == "True")
