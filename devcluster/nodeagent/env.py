"""Container environment like the kubelet builds it (pure: every lookup is passed in).

* ``expand``: Kubernetes ``$(VAR)`` expansion (``$$`` escapes, unknown or unterminated references stay
  as written), the same rules as ``k8s.io/kubernetes/third_party/forked/golang/expansion``.
* ``resolve_env``: ``envFrom`` then ``env`` of one container, with ``valueFrom`` (fieldRef,
  resourceFieldRef, configMapKeyRef, secretKeyRef) and ``optional`` handled like the kubelet.
* ``field_ref``: the downward API fields a fieldRef may name.
"""

from __future__ import annotations

import base64
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping, Optional

# (namespace, name) -> {"data": {...}, "binaryData": {...}} (a ConfigMap) or None when it does not exist.
ConfigMapGetter = Callable[[str, str], Optional[Mapping[str, Any]]]
# (namespace, name) -> {"data": {key: base64}, "stringData": ...} (a Secret) or None when it does not exist.
SecretGetter = Callable[[str, str], Optional[Mapping[str, Any]]]


class EnvError(Exception):
    """The container's environment cannot be built yet (the kubelet's CreateContainerConfigError)."""


# --------------------------------------------------------------------------- $(VAR) expansion

def expand(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` references in ``text`` from ``env``.

    ``$$`` is an escaped ``$``; ``$(UNKNOWN)`` and an unterminated ``$(`` are left as written; a ``$``
    followed by anything else is kept with that character.
    """
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == "$" and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1:]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = rest[1:close]
                    out.append(env[name] if name in env else f"$({name})")
                    advance = close + 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def expand_command(container: Mapping[str, Any], env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The container's command and args with ``$(VAR)`` expanded from its environment."""
    return ([expand(str(c), env) for c in container.get("command") or []],
            [expand(str(a), env) for a in container.get("args") or []])


# --------------------------------------------------------------------------- quantities

_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)$")


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (``500m``, ``1Gi``, ``2``, ``1e3``) as a Decimal."""
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"invalid quantity {value!r}")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {value!r}") from exc
    suffix = m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


# --------------------------------------------------------------------------- downward API

_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def field_ref(pod: Mapping[str, Any], path: str) -> str:
    """Value of a fieldRef ``path`` on ``pod`` (a pod as a dict, camelCase keys, status.podIP filled)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []) or status.get("podIP"),
        "status.hostIPs": ",".join(p.get("ip", "") for p in status.get("hostIPs") or []) or status.get("hostIP"),
    }
    if path not in simple:
        raise EnvError(f"unsupported fieldRef fieldPath {path!r}")
    value = simple[path]
    return "" if value is None else str(value)


def resource_field_ref(pod: Mapping[str, Any], container: Mapping[str, Any], ref: Mapping[str, Any],
                       node_allocatable: Mapping[str, Any] | None = None) -> str:
    """Value of a resourceFieldRef: like the kubelet, an unset limit falls back to the node's allocatable
    and values are rounded up to whole divisors (cpu ``1`` -> cores, memory ``1Mi`` -> MiB)."""
    name = ref.get("containerName") or container.get("name")
    target = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), container)
    resource = str(ref.get("resource", ""))
    kind, _, res = resource.partition(".")
    if kind not in ("limits", "requests") or not res:
        raise EnvError(f"unsupported resourceFieldRef resource {resource!r}")
    values = ((target.get("resources") or {}).get(kind) or {})
    raw = values.get(res)
    if raw is None and kind == "requests":
        raw = ((target.get("resources") or {}).get("limits") or {}).get(res)
    if raw is None:
        raw = (node_allocatable or {}).get(res, 0) if kind == "limits" else 0
    divisor = parse_quantity(ref.get("divisor") or "1")
    if divisor == 0:
        raise EnvError(f"resourceFieldRef {resource!r}: divisor is zero")
    return str(int(math.ceil(parse_quantity(raw) / divisor)))


# --------------------------------------------------------------------------- env resolution

def _configmap_value(cm: Mapping[str, Any], key: str) -> Optional[str]:
    data = cm.get("data") or {}
    if key in data:
        return str(data[key])
    binary = cm.get("binaryData") or {}
    if key in binary:
        return base64.b64decode(binary[key]).decode("utf-8", errors="replace")
    return None


def configmap_items(cm: Mapping[str, Any]) -> dict[str, str]:
    """All keys of a ConfigMap (data and binaryData) as strings."""
    out = {k: str(v) for k, v in (cm.get("data") or {}).items()}
    for k, v in (cm.get("binaryData") or {}).items():
        out[k] = base64.b64decode(v).decode("utf-8", errors="replace")
    return out


def secret_items(secret: Mapping[str, Any]) -> dict[str, str]:
    """All keys of a Secret, base64-decoded (stringData, if a caller passes it, wins as on the API)."""
    out = {k: base64.b64decode(v).decode("utf-8", errors="replace") for k, v in (secret.get("data") or {}).items()}
    out.update({k: str(v) for k, v in (secret.get("stringData") or {}).items()})
    return out


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any], get_configmap: ConfigMapGetter,
                get_secret: SecretGetter, node_allocatable: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The environment the kubelet would give ``container`` (without image defaults), in order.

    ``envFrom`` sources come first, then ``env``; a later name replaces an earlier one. ``$(VAR)`` in an
    ``env`` value expands from what was defined before it. A missing ConfigMap/Secret or key raises
    ``EnvError`` unless the reference is ``optional`` (then the variable is left out).
    """
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    env: dict[str, str] = {}
    # envFrom source key -> (how to fetch it, how to read its data, its kind in the kubelet's error)
    kinds = {"configMapRef": (get_configmap, configmap_items, "configmap"),
             "secretRef": (get_secret, secret_items, "secret")}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        ref_key = next((k for k in kinds if k in source), None)
        if ref_key is None:
            continue
        get, read, kind = kinds[ref_key]
        ref = source[ref_key]
        obj = get(namespace, ref.get("name", ""))
        if obj is None:
            if ref.get("optional"):
                continue
            raise EnvError(f'{kind} "{ref.get("name")}" not found')
        for key, value in read(obj).items():
            name = prefix + key
            if name and "=" not in name:
                env[name] = value
    for var in container.get("env") or []:
        name = var.get("name")
        if not name:
            continue
        if "valueFrom" not in var or var.get("value"):
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        source = var["valueFrom"] or {}
        if "fieldRef" in source:
            env[name] = field_ref(pod, source["fieldRef"].get("fieldPath", ""))
        elif "resourceFieldRef" in source:
            env[name] = resource_field_ref(pod, container, source["resourceFieldRef"], node_allocatable)
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            cm = get_configmap(namespace, ref.get("name", ""))
            value = None if cm is None else _configmap_value(cm, ref.get("key", ""))
            if value is None:
                if ref.get("optional"):
                    continue
                if cm is None:
                    raise EnvError(f'configmap "{ref.get("name")}" not found')
                raise EnvError(f'couldn\'t find key {ref.get("key")} in ConfigMap {namespace}/{ref.get("name")}')
            env[name] = value
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = get_secret(namespace, ref.get("name", ""))
            items = None if secret is None else secret_items(secret)
            if items is None or ref.get("key", "") not in items:
                if ref.get("optional"):
                    continue
                if secret is None:
                    raise EnvError(f'secret "{ref.get("name")}" not found')
                raise EnvError(f'couldn\'t find key {ref.get("key")} in Secret {namespace}/{ref.get("name")}')
            env[name] = items[ref["key"]]
        else:
            env[name] = ""
    return env


def container_env(base: Mapping[str, str], resolved: Mapping[str, str]) -> dict[str, str]:
    """The process environment: the agent's image-like defaults overlaid by the pod's variables."""
    return {**base, **resolved}
