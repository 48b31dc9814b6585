"""Which controller runs a job: ``spec.managedBy``, as the Kubernetes Job and JobSet define it.

An operator runs a job when the job names it (unset names the default controller). Every other
job is left alone: no pods, no status write, no event, and no cleanup of what another controller
made for it. Kueue's MultiKueue relies on this: it sets ``kueue.x-k8s.io/multikueue`` on the
manager cluster's copy of a job, whose pods run on a worker cluster. A second operator installed
with its own ``controllerName`` (a canary release, a test run beside the main one) runs only the
jobs that name it. The field is immutable (the CRD's rule), so a job never changes hands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DEFAULT_CONTROLLER = "dpjob.io/operator"
# A domain-prefixed name of at most 63 characters: the CRD's pattern for spec.managedBy, the same
# text (tests/unit/test_managed_by.py compares them), so an operator's name is one a job can carry.
PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
MAX_LENGTH = 63


def valid_controller_name(name: str) -> bool:
    return len(name) <= MAX_LENGTH and re.match(PATTERN, name) is not None


def managed_by(body: Mapping[str, Any]) -> str:
    """The controller a job's body names; the default one when it names none."""
    spec = body.get("spec") or {}
    return str(spec.get("managedBy") or DEFAULT_CONTROLLER)


def runs_here(body: Mapping[str, Any], controller_name: str) -> bool:
    """Whether the operator named ``controller_name`` runs this job."""
    return managed_by(body) == controller_name
