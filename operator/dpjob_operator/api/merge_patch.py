"""The status write's body: the RFC 7386 JSON merge patch between two wire forms (pure)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns ``old`` into ``new``: only what changed; null for a key
    ``new`` lacks, at any depth; an object is patched key by key, anything else (a list included)
    is replaced whole. Equal documents give an empty patch."""
    patch: dict[str, Any] = {key: None for key in old if new.get(key) is None}
    for key, value in new.items():
        if value is None:
            continue
        before = old.get(key)
        if key in old and before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = status_patch(before, value)
        else:
            patch[key] = copy.deepcopy(value)
    return patch
