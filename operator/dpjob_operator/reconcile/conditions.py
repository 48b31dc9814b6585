"""Kubernetes-style conditions: lastTransitionTime moves only when the status flips."""

from __future__ import annotations

from collections.abc import Sequence

from dpjob_operator.api.status import Condition


def set_condition(conditions: Sequence[Condition], type_: str, status: bool, reason: str, message: str,
                  now: str, generation: int) -> tuple[Condition, ...]:
    """Return the conditions with ``type_`` set; order of first appearance is kept."""
    value = "True" if status else "False"
    was = next((cond for cond in conditions if cond.type == type_), None)
    kept = was is not None and was.status == value and was.last_transition_time is not None
    new = Condition(type=type_, status=value, reason=reason, message=message,
                    last_transition_time=was.last_transition_time if kept and was else now,
                    observed_generation=generation)
    if was is None:
        return (*conditions, new)
    return tuple(new if cond is was else cond for cond in conditions)
