"""What an API error means to the controller, so nothing outside ``k8s/`` imports the client.

The controller asks three questions of a failed call: is the namespace going away (nothing to
fix, nothing to shout about), did the cluster refuse the object itself (quota, admission, an
invalid template: the user must change something, so it goes into the job's status), and what
did the server say (its ``message``, not a wall of JSON). The answers live here, next to the
only code that raises ``ApiException``.
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

ApiError = ApiException

# Statuses with which the API server refuses an object for what it is, not for a passing reason:
# 400 Bad Request / 422 Invalid (the template), 403 Forbidden (quota, admission, policy).
REFUSAL_STATUSES = frozenset({400, 403, 422})
_MESSAGE_LIMIT = 800


def status_of(error: BaseException) -> int | None:
    """The HTTP status of an API error; None for anything else (a timeout, a bug)."""
    return int(error.status) if isinstance(error, ApiException) and error.status is not None else None


def is_api_error(error: BaseException) -> bool:
    return isinstance(error, ApiException)


def is_namespace_terminating(error: BaseException) -> bool:
    """403 NamespaceTerminating: creating in a namespace being deleted; it and the job are going away."""
    if status_of(error) != 403:
        return False
    body = getattr(error, "body", None)  # text since kubernetes 37, bytes before
    raw = body if isinstance(body, bytes) else str(body or "").encode()
    return b"NamespaceTerminating" in raw


def is_conflict(error: BaseException) -> bool:
    """409: the object changed since we read it (optimistic concurrency), or it already exists."""
    return status_of(error) == 409


def is_refusal(error: BaseException) -> bool:
    """The cluster refused the object itself (see REFUSAL_STATUSES): retrying alone will not help."""
    return status_of(error) in REFUSAL_STATUSES


def api_message(error: BaseException) -> str:
    """The server's ``message`` from an error's Status body (the readable part), else the error's text."""
    detail = getattr(error, "body", None) or str(error)
    return message_of(detail)


def message_of(detail: object) -> str:
    """``message`` of a JSON Status document (bytes or text), else the detail itself; at most 800 chars."""
    if isinstance(detail, (bytes, str)):
        try:
            return str(json.loads(detail).get("message", str(detail)))[:_MESSAGE_LIMIT]
        except (ValueError, AttributeError):
            return str(detail)[:_MESSAGE_LIMIT]
    return str(detail)[:_MESSAGE_LIMIT]


def describe(error: BaseException) -> str:
    """One line for a log: ``<status> <message>`` for an API error, the error's text otherwise."""
    status = status_of(error)
    return f"{status} {api_message(error)}" if status is not None else str(error)
