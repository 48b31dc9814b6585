"""Pure: does a gang of rank pods fit the cluster's free capacity right now?

Free room of a node = allocatable - requests of the pods still on it. A node is eligible when it is
Ready, schedulable, carries the pod's nodeSelector labels and every NoSchedule/NoExecute taint is
tolerated. The gang fits when the eligible nodes (or, with a topology key, the nodes of one domain)
together have room for ``min_count`` pods. Affinity rules and scheduler plugins are not modelled:
this is an estimate of what the scheduler will find, printed as one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from dpjob_operator.api.tolerations import tolerates as toleration_tolerates

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(1000),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
            "E": Decimal(10**18)}


def quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity ('500m', '512Mi', '8', '1e3') in base units (cores, bytes, devices)."""
    raw = str(text).strip()
    try:
        for suffix, scale in _BINARY.items():
            if raw.endswith(suffix):
                return Decimal(raw[: -len(suffix)]) * scale
        if raw and raw[-1] in _DECIMAL and not raw[-1].isdigit():
            return Decimal(raw[:-1]) * _DECIMAL[raw[-1]]
        return Decimal(raw)
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """What a pod asks the scheduler for: sum of its containers' requests (limits where no request), plus 1 pod."""
    total: dict[str, Decimal] = {"pods": Decimal(1)}
    for container in pod_spec.get("containers") or []:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, Decimal(0)) + quantity(value)
    return total


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """The scheduler's rule, the operator's own implementation: the CLI and the operator agree."""
    return any(toleration_tolerates(tol, taint) for tol in tolerations)


def eligible(node: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool:
    """Ready, schedulable, labels match the nodeSelector, every hard taint tolerated."""
    spec, meta = node.get("spec") or {}, node.get("metadata") or {}
    if spec.get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    if not any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions):
        return False
    labels = meta.get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    hard = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    return all(tolerates(pod_spec.get("tolerations") or [], t) for t in hard)


def free_room(node: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]]) -> dict[str, Decimal]:
    room = {k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
    for pod in pods_on_node:
        for name, value in pod_requests(pod.get("spec") or {}).items():
            room[name] = room.get(name, Decimal(0)) - value
    return room


def pods_that_fit(room: Mapping[str, Decimal], request: Mapping[str, Decimal]) -> int:
    counts = [int(room.get(name, Decimal(0)) // value) for name, value in request.items()
              if value > 0 and (name != "pods" or name in room)]  # a node that does not count pods has no cap
    return max(0, min(counts)) if counts else 0


@dataclass(frozen=True)
class Capacity:
    """The answer, with enough detail to say why."""

    fits: bool
    needed: int  # pods the gang needs at once
    room: int  # pods the best domain (or the whole cluster) has room for
    eligible_nodes: int
    per_node: dict[str, int] = field(default_factory=dict)  # node -> pods that fit there
    request: dict[str, str] = field(default_factory=dict)  # one pod's request, as quantities
    domain: str | None = None  # the topology domain with the most room, when a key is set


def gang_capacity(nodes: Sequence[Mapping[str, Any]], active_pods: Sequence[Mapping[str, Any]],
                  pod_spec: Mapping[str, Any], needed: int, topology_key: str | None = None) -> Capacity:
    """How many rank pods shaped like ``pod_spec`` fit now, and whether ``needed`` of them do."""
    request = pod_requests(pod_spec)
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in active_pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            by_node.setdefault(node_name, []).append(pod)
    per_node: dict[str, int] = {}
    domains: dict[str, int] = {}
    for node in nodes:
        if not eligible(node, pod_spec):
            continue
        name = node["metadata"]["name"]
        per_node[name] = pods_that_fit(free_room(node, by_node.get(name, [])), request)
        if topology_key:
            value = (node["metadata"].get("labels") or {}).get(topology_key)
            if value is not None:
                domains[value] = domains.get(value, 0) + per_node[name]
    if topology_key:
        domain, room = max(domains.items(), key=lambda kv: kv[1], default=(None, 0))
    else:
        domain, room = None, sum(per_node.values())
    shown = {k: _fmt(k, v) for k, v in request.items() if k != "pods"}
    return Capacity(fits=room >= needed, needed=needed, room=room, eligible_nodes=len(per_node),
                    per_node=per_node, request=shown, domain=domain)


def _fmt(name: str, value: Decimal) -> str:
    """A quantity as a person writes it: 512Mi, 500m, 8."""
    if name == "memory" or name.endswith("storage"):
        for suffix, scale in reversed(list(_BINARY.items())):
            if value >= scale and value % scale == 0:
                return f"{int(value // scale)}{suffix}"
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"
