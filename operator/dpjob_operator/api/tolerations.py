"""Does a pod tolerate a node's taint? The scheduler's rule (v1.Toleration.ToleratesTaint), pure.

Used to tell a node that a health tool has tainted (NoSchedule/NoExecute: the node problem detector,
a GPU health check, a drain) from the taints a pool's pods are meant to tolerate (``nvidia.com/gpu``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # an empty key with Exists tolerates everything
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]) -> list[str]:
    """Keys of the NoSchedule/NoExecute taints none of ``tolerations`` tolerates."""
    return [str(t.get("key")) for t in taints
            if t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in tolerations)]
