"""Helpers that talk to the real API server: kubectl, DataParallelJob CRUD, status, rank pods, events.

Tests drive the operator the way a user does (create a job, watch its status and pods), so these
helpers use the official client and the cluster's own kubectl against the dev cluster, never a
fake. Every wait here goes through ``waits.wait_until`` and names what it waits for.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from devcluster import kube
from tests.support.paths import DEVCLUSTER, KUBECONFIG
from tests.support.waits import wait_until

GROUP, VERSION, PLURAL = "dpjob.io", "v1alpha1", "dataparalleljobs"
JOB_LABEL, RANK_LABEL, RESTART_LABEL = "dpjob.io/job-name", "dpjob.io/rank", "dpjob.io/restart"


# The cluster's own kubectl against the tests' kubeconfig (DPJOB_TEST_KUBECONFIG can point it elsewhere).
kubectl = functools.partial(kube.kubectl, kubeconfig=KUBECONFIG, binary=DEVCLUSTER / "bin" / "kubectl")


def _jobs(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


# The operator this test session's jobs name in spec.managedBy (set by tests/conftest.py for
# ``--cluster-stream side``): None leaves the field unset, for the default operator. The side stream
# (devcluster/test.sh) has an operator of its own, which runs only the jobs naming it.
OPERATOR_NAME: dict[str, str | None] = {"managedBy": None}


def controller_name() -> str:
    from dpjob_operator.api.managed_by import DEFAULT_CONTROLLER

    return OPERATOR_NAME["managedBy"] or DEFAULT_CONTROLLER


def for_this_session(job: dict[str, Any]) -> dict[str, Any]:
    """The job naming this session's operator in spec.managedBy, unless it names one already."""
    if not OPERATOR_NAME["managedBy"] or "managedBy" in job.get("spec", {}):
        return job
    return {**job, "spec": {**job["spec"], "managedBy": OPERATOR_NAME["managedBy"]}}


def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a DataParallelJob (``JobBuilder(...).obj()`` or a parsed example), for this session's operator."""
    created: dict[str, Any] = _jobs(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                         for_this_session(body))
    return created


def apply_file(namespace: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``kubectl apply -f path`` as a user runs it, the jobs in it naming this session's operator."""
    docs = [for_this_session(d) if d.get("kind") == "DataParallelJob" else d
            for d in yaml.safe_load_all(path.read_text()) if d]
    return kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(docs), check=False)


def get(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = _jobs(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return found


def list_jobs(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _jobs(api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    return items


def patch(api: client.ApiClient, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of the job, as ``kubectl patch --type=merge`` would send."""
    patched: dict[str, Any] = _jobs(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)
    return patched


def delete(api: client.ApiClient, namespace: str, name: str) -> None:
    _jobs(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The job's status, ``{}`` before the operator first writes one."""
    return get(api, namespace, name).get("status") or {}


def wait_status(api: client.ApiClient, namespace: str, name: str, ok: Callable[[dict[str, Any]], bool], *,
                what: str, timeout: float = 30) -> dict[str, Any]:
    """The job's status once ``ok(status)`` holds; fails naming ``what`` and the last status seen."""
    def check() -> dict[str, Any] | None:
        st = status(api, namespace, name)
        return st if ok(st) else None
    found: dict[str, Any] = wait_until(check, timeout, what=f"{namespace}/{name}: {what}")
    return found


def wait_phase(api: client.ApiClient, namespace: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    """The job's status once it reaches ``phase``."""
    return wait_status(api, namespace, name, lambda st: st.get("phase") == phase, what=f"phase {phase}",
                       timeout=timeout)


def rank_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[Any]:
    """The job's rank pods (every restart's, terminating ones included), sorted by rank."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}").items
    return sorted(pods, key=lambda p: int(p.metadata.labels[RANK_LABEL]))


def wait_pods(core: client.CoreV1Api, namespace: str, name: str, count: int, phase: str = "Running",
              restart: int | None = None, timeout: float = 60) -> list[Any]:
    """Exactly ``count`` live rank pods of the job (of restart ``restart`` if given), all in ``phase``."""
    def ok() -> list[Any] | None:
        pods = [p for p in rank_pods(core, namespace, name) if not p.metadata.deletion_timestamp]
        if restart is not None:
            pods = [p for p in pods if p.metadata.labels[RESTART_LABEL] == str(restart)]
        return pods if len(pods) == count and all(p.status.phase == phase for p in pods) else None
    found: list[Any] = wait_until(ok, timeout, what=f"{count} {phase} pods of {namespace}/{name}")
    return found


def quota_full_of_configmaps(core: client.CoreV1Api, namespace: str, name: str) -> None:
    """A ResourceQuota named ``name`` that admits no further ConfigMap in ``namespace``, counted.

    kube-controller-manager publishes the namespace's kube-root-ca.crt some time after the namespace
    is made (later still when it is busy): a quota set from a count taken before it would leave room
    for one more, so the ConfigMap is waited for first. The API server admits against the quota
    controller's count, whose first pass can wait behind a busy controller manager (a thousand pods
    of another test being collected): generous deadlines, returned from at once."""
    root_ca = "metadata.name=kube-root-ca.crt"
    wait_until(lambda: core.list_namespaced_config_map(namespace, field_selector=root_ca).items,
               timeout=180, interval=0.5, what=f"kube-root-ca.crt published in {namespace}")
    used = str(len(core.list_namespaced_config_map(namespace).items))
    core.create_namespaced_resource_quota(namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name=name), spec=client.V1ResourceQuotaSpec(hard={"configmaps": used})))

    def counted() -> bool:
        return (core.read_namespaced_resource_quota(name, namespace).status.used or {}).get("configmaps") == used

    wait_until(counted, timeout=180, interval=0.5, what=f"the quota controller's count of {name} at {used}")


def env_of(pod: Any, container: str = "trainer") -> dict[str, str]:
    """A container's environment as the kubelet gives it (``value`` entries; ``envFrom`` ConfigMaps
    read from the cluster, as they are now): the rank pods take what all ranks share from one."""
    from kubernetes import config as kube_config

    from tests.support.podenv import kubelet_env

    ctr = next(c for c in pod.spec.containers if c.name == container)
    core = client.CoreV1Api(kube_config.new_client_from_config(str(KUBECONFIG)))
    names = [s.config_map_ref.name for s in ctr.env_from or [] if s.config_map_ref]
    maps = {name: core.read_namespaced_config_map(name, pod.metadata.namespace).data or {} for name in names}
    return kubelet_env(client.ApiClient().sanitize_for_serialization(ctr), maps)


def events(namespace: str, name: str) -> list[dict[str, Any]]:
    """The events whose involved object is named ``name`` (the job's, as ``kubectl describe`` shows)."""
    out = kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return items


def wait_event(namespace: str, name: str, reason: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The object's events with ``reason``, once there is one. Events are sent behind the pass
    (controller/recorder.py), so one may land a moment after the status that announces it."""
    found: list[dict[str, Any]] = wait_until(
        lambda: [e for e in events(namespace, name) if e["reason"] == reason], timeout,
        what=f"a {reason} event on {namespace}/{name}")
    return found


def lease(namespace: str, name: str) -> dict[str, Any] | None:
    """A coordination.k8s.io Lease as stored (leader election's), None when there is none."""
    out = kubectl("get", "lease", name, "-n", namespace, "-o", "json", check=False)
    if out.returncode != 0:
        if "NotFound" in out.stderr:
            return None
        raise AssertionError(f"kubectl get lease {namespace}/{name}: {out.stderr.strip()}")
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def lease_holder(namespace: str, name: str) -> str:
    """Who holds the Lease now ("" when it is free or absent)."""
    found = lease(namespace, name)
    return str(((found or {}).get("spec") or {}).get("holderIdentity") or "")
