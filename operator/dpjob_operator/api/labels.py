"""The labels the operator puts on a job's objects, and the selectors that find them again.

One home: the Service selects rank pods, the scale subresource reports ``status.selector``, the
pod watch and the PodGroup clean-up list by label, and all of them must agree with what the
builders wrote, or the operator loses track of its own objects.
"""

from __future__ import annotations

from collections.abc import Mapping

from dpjob_operator.api import constants as c
from dpjob_operator.api.spec import Job

#: Every pod any job of this operator owns (the cluster-wide pod watch).
MANAGED_POD_SELECTOR = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY},{c.LABEL_JOB}"


def job_labels(job: Job) -> dict[str, str]:
    """Labels of every object a job owns; also the headless Service's pod selector."""
    return {c.LABEL_JOB: job.name, c.LABEL_MANAGED_BY: c.MANAGED_BY}


def generation_labels(job: Job, restart: int) -> dict[str, str]:
    """``job_labels`` plus the gang generation, for objects that belong to one generation."""
    return {**job_labels(job), c.LABEL_RESTART: str(restart)}


def rank_labels(job: Job, index: int, restart: int) -> dict[str, str]:
    """Labels of rank pod ``index`` of generation ``restart``: what the pod watch parses back."""
    return {**job_labels(job), c.LABEL_RANK: str(index), c.LABEL_RESTART: str(restart)}


def generation_match_labels(job: Job, restart: int) -> dict[str, str]:
    """Match labels of one gang generation's rank pods (pod affinity between ranks)."""
    return {c.LABEL_JOB: job.name, c.LABEL_RESTART: str(restart)}


def selector(labels: Mapping[str, str]) -> str:
    """A label selector string (``k=v,k=v``) matching all of ``labels``, in their order."""
    return ",".join(f"{key}={value}" for key, value in labels.items())


def pod_selector(job: Job) -> str:
    """Label selector of a job's rank pods (status.selector for the scale subresource)."""
    return selector(job_labels(job))
