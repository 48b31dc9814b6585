"""Make a kwok pod fail on demand, through the dev cluster's chaos stage (devcluster/kwok_pools.py
installs kwok's ``pod-container-running-failed`` stage): a running pod labelled so goes Failed
after ``delay`` with its container's ``exit_code``. One spelling for the tests and the benchmarks."""

from __future__ import annotations

from kubernetes import client

FAIL_STAGE = "pod-container-running-failed.stage.kwok.x-k8s.io"


def fail_pod(core: client.CoreV1Api, namespace: str, name: str, exit_code: int | None = None,
             delay: str = "100ms") -> None:
    """Have kwok fail the running pod ``name`` (exit code ``exit_code``, else the stage's default)."""
    annotations = {f"{FAIL_STAGE}/delay": delay}
    if exit_code is not None:
        annotations[f"{FAIL_STAGE}/exit-code"] = str(exit_code)
    core.patch_namespaced_pod(name, namespace, {"metadata": {"labels": {FAIL_STAGE: "true"},
                                                             "annotations": annotations}})
