"""The DataParallelJob CRD as the chart installs it (crds/dataparalleljob.yaml links to it)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.paths import REPO

CRD = REPO / "crds" / "dataparalleljob.yaml"


def crd_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the storage version."""
    doc = yaml.safe_load(CRD.read_text())
    [version] = [v for v in doc["spec"]["versions"] if v.get("storage")]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema
