"""The Kueue integration's I/O, against a fake API: when it turns on, which Workload events wake which
job, what creating a Workload reads first (the job's priority class), that a ResourceFlavor is read
once, that a 409 on a patch waits for the next pass, and that a deleted job's Workload is let go."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dpjob_operator.api import kueue as k
from dpjob_operator.api.pools import DEFAULT_POOLS
from dpjob_operator.api.spec import parse_job
from dpjob_operator.builders.kueue_workload import build_workload
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller import kueue as kueue_module
from dpjob_operator.controller.child_failures import ChildConflict, PriorityClassNotFound
from dpjob_operator.controller.kueue import KueueWorkloads
from dpjob_operator.controller.kueue_watch import KueueWatch
from dpjob_operator.reconcile.actions import PatchKueueWorkload
from tests.support.builders import JobBuilder, pod
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.unit


class FakeKube:
    def __init__(self, serves: bool = True) -> None:
        self.serving = serves
        self.namespaced: dict[tuple[str, str, str], dict[str, Any]] = {}   # (plural, ns, name)
        self.cluster: dict[tuple[str, str], dict[str, Any]] = {}           # (plural, name)
        self.reads: list[tuple[str, str]] = []
        self.patches: list[tuple[str, Mapping[str, Any], bool]] = []
        self.conflict = False

    def serves(self, _group: str, _version: str, _plural: str) -> bool:
        return self.serving

    def create_object(self, _group: str, _version: str, plural: str, obj: Mapping[str, Any]) -> bool:
        key = (plural, obj["metadata"]["namespace"], obj["metadata"]["name"])
        if key in self.namespaced:
            return False
        self.namespaced[key] = dict(obj)
        return True

    def get_object(self, _group: str, _version: str, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.namespaced.get((plural, ns, name))

    def get_cluster_object(self, _group: str, _version: str, plural: str, name: str) -> dict[str, Any] | None:
        self.reads.append((plural, name))
        return self.cluster.get((plural, name))

    def list_cluster_objects(self, _group: str, _version: str, plural: str) -> list[dict[str, Any]]:
        self.reads.append((plural, "*"))
        return [obj for (kind, _), obj in self.cluster.items() if kind == plural]

    def patch_object(self, _group: str, _version: str, _plural: str, _ns: str, name: str,
                     patch: Mapping[str, Any], status: bool = False) -> None:
        if self.conflict:
            raise ApiException(status=409, reason="Conflict")
        self.patches.append((name, patch, status))


class InlineBlocking:
    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def queued_job(labels=None, builder=None):
    body = (builder or JobBuilder()).served()
    body["metadata"]["labels"] = {k.LABEL_QUEUE_NAME: "team-a", **(labels or {})}
    return parse_job(body)


def integration(kube: FakeKube, monkeypatch, may_list=True, clock=None):
    woken: list[tuple[str, str]] = []
    watch = KueueWatch(kube, lambda ns, job: woken.append((ns, job)))  # type: ignore[arg-type]
    watch.start = lambda: None  # the reflector's threads: the test feeds its events itself
    monkeypatch.setattr(kueue_module, "may_list", lambda *_: may_list)
    it = KueueWorkloads(OperatorConfig(), kube, InlineBlocking(), watch,  # type: ignore[arg-type]
                        clock=(clock or FakeClock()).monotonic)
    return it, watch, woken


def claim_ours(_kind: str, meta: Mapping[str, Any]) -> None:
    if (next(r for r in meta["ownerReferences"] if r.get("controller")))["uid"] != "uid-train":
        raise ChildConflict("Kueue Workload", "not ours", "not ours")


@pytest.mark.parametrize("mode, serves, may_list, on", [
    ("auto", True, True, True),
    ("auto", False, True, False),      # no Kueue in the cluster
    ("auto", True, False, False),      # Kueue, but our RBAC may not list Workloads: say so, run without
    ("disabled", True, True, False),
])
def test_the_integration_is_on_only_where_kueue_serves_workloads_and_we_may_list_them(mode, serves, may_list, on,
                                                                                       monkeypatch):
    kube = FakeKube(serves)
    it, _, _ = integration(kube, monkeypatch, may_list)
    it.mode = mode
    assert asyncio.run(it.detect()) is on and it.enabled is on
    assert (asyncio.run(it.observe(queued_job())) is not None) is on


def test_a_workload_event_wakes_its_job_and_the_pass_reads_the_workload_from_the_watch(monkeypatch):
    kube = FakeKube()
    it, watch, woken = integration(kube, monkeypatch)
    asyncio.run(it.detect())
    job = queued_job()
    body = build_workload(job, DEFAULT_POOLS["cpu"])
    body["metadata"]["managedFields"] = [{"manager": "kueue"}]
    watch._event("MODIFIED", body)
    assert woken == [("ns", "train")]
    seen = asyncio.run(it.observe(job))
    assert seen is not None and seen.workload is not None and "managedFields" not in seen.workload["metadata"]
    assert watch.of_job("ns", "train") == [seen.workload]
    watch._event("DELETED", body)
    assert watch.of_job("ns", "train") == [] and woken == [("ns", "train")] * 2


def test_a_relist_wakes_only_the_jobs_whose_workload_changed(monkeypatch):
    kube = FakeKube()
    _, watch, woken = integration(kube, monkeypatch)
    a = build_workload(queued_job(), DEFAULT_POOLS["cpu"])
    a["metadata"]["resourceVersion"] = "1"
    b = build_workload(queued_job(builder=JobBuilder("other")), DEFAULT_POOLS["cpu"])
    b["metadata"]["resourceVersion"] = "1"
    watch._relisted(None, [a, b])
    woken.clear()
    changed = {**b, "metadata": {**b["metadata"], "resourceVersion": "2"}}
    watch._relisted(None, [a, changed])
    assert woken == [("ns", "other")]


@pytest.mark.parametrize("labels, template_class, stored, expected", [
    ({k.LABEL_PRIORITY_CLASS: "high"}, None, {("workloadpriorityclasses", "high"): {"value": 1000}},
     (1000, {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"})),
    ({}, "batch-low", {("priorityclasses", "batch-low"): {"value": 50}},
     (50, {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "batch-low"})),
    ({}, None, {("priorityclasses", "default"): {"metadata": {"name": "default"}, "value": 7, "globalDefault": True}},
     (7, {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "default"})),
    ({}, None, {}, (0, None)),
])
def test_a_new_workload_carries_the_priority_of_the_jobs_class(labels, template_class, stored, expected, monkeypatch):
    kube = FakeKube()
    kube.cluster.update(stored)
    it, _, _ = integration(kube, monkeypatch)
    asyncio.run(it.detect())
    builder = JobBuilder()
    if template_class:
        builder.set("template.spec.priorityClassName", template_class)
    job = queued_job(labels, builder)
    asyncio.run(it.ensure(job, DEFAULT_POOLS["cpu"], claim_ours))
    [made] = kube.namespaced.values()
    assert (made["spec"]["priority"], made["spec"].get("priorityClassRef")) == expected
    assert made["metadata"]["name"] == k.workload_name("train", "uid-train")


def test_a_missing_priority_class_makes_no_workload_and_says_which(monkeypatch):
    kube = FakeKube()
    it, _, _ = integration(kube, monkeypatch)
    asyncio.run(it.detect())
    with pytest.raises(PriorityClassNotFound, match="WorkloadPriorityClass 'urgent' not found"):
        asyncio.run(it.ensure(queued_job({k.LABEL_PRIORITY_CLASS: "urgent"}), DEFAULT_POOLS["cpu"], claim_ours))
    assert kube.namespaced == {}


def test_a_workload_of_the_jobs_name_that_another_owner_controls_is_never_adopted(monkeypatch):
    kube = FakeKube()
    it, _, _ = integration(kube, monkeypatch)
    asyncio.run(it.detect())
    job = queued_job()
    squatter = build_workload(job, DEFAULT_POOLS["cpu"])
    squatter["metadata"]["ownerReferences"] = [{"kind": "JobSet", "name": "x", "uid": "other", "controller": True}]
    kube.namespaced[("workloads", "ns", squatter["metadata"]["name"])] = squatter
    with pytest.raises(ChildConflict) as raised:
        asyncio.run(it.ensure(job, DEFAULT_POOLS["cpu"], claim_ours))
    assert raised.value.reason == "KueueWorkloadNameConflict" and raised.value.condition == "Admitted"


def test_an_admitted_flavor_is_read_once_and_then_remembered(monkeypatch):
    kube = FakeKube()
    kube.cluster[("resourceflavors", "spot")] = {"spec": {"nodeLabels": {"spot": "true"}}}
    clock = FakeClock()
    it, watch, _ = integration(kube, monkeypatch, clock=clock)
    asyncio.run(it.detect())
    job = queued_job()
    body = build_workload(job, DEFAULT_POOLS["cpu"])
    body["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "count": 2, "flavors": {"cpu": "spot", "memory": "gone"}}]},
        "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]}
    watch._event("ADDED", body)
    for _ in range(3):
        seen = asyncio.run(it.observe(job))
        assert seen is not None and seen.flavors == {"spot": k.Flavor(node_labels={"spot": "true"})}
    assert kube.reads.count(("resourceflavors", "spot")) == 1
    assert kube.reads.count(("resourceflavors", "gone")) == 3       # one not found is asked for again
    clock.advance(it.memo_seconds + 1)
    asyncio.run(it.observe(job))
    assert kube.reads.count(("resourceflavors", "spot")) == 2


def test_a_patch_that_meets_a_newer_workload_waits_for_the_next_pass(monkeypatch):
    kube = FakeKube()
    kube.conflict = True
    it, _, _ = integration(kube, monkeypatch)
    action = PatchKueueWorkload("w", {"metadata": {"resourceVersion": "1"}}, True, "pods ready")
    asyncio.run(it.patch(queued_job(), action))   # no exception: the watch brings the change
    assert kube.patches == []


def test_a_deleted_jobs_workload_is_let_go_once_its_pods_are_gone_but_the_live_namesakes_is_not(monkeypatch):
    kube = FakeKube()
    it, watch, _ = integration(kube, monkeypatch)
    asyncio.run(it.detect())
    old = build_workload(queued_job(), DEFAULT_POOLS["cpu"])
    old["metadata"].update(resourceVersion="5", deletionTimestamp="2026-03-21T16:00:00Z")
    watch._event("MODIFIED", old)
    asyncio.run(it.release_orphans("ns", "train", [pod(0, deleting=True)]))
    assert kube.patches == []                                     # its rank still terminates
    asyncio.run(it.release_orphans("ns", "train", []))
    assert kube.patches == [(old["metadata"]["name"], {"metadata": {"resourceVersion": "5", "finalizers": []}},
                             False)]
    kube.patches.clear()
    asyncio.run(it.release_orphans("ns", "train", [], live_uid="uid-train"))  # the planner's to handle
    assert kube.patches == []


@pytest.mark.parametrize("file, environ, expected", [
    ("{}", {}, ("auto", False)),
    ('{"kueue": "disabled", "kueueShortWorkloadNames": true}', {}, ("disabled", True)),
    ('{"kueue": "disabled"}', {"DPJOB_KUEUE": "auto", "DPJOB_KUEUE_SHORT_WORKLOAD_NAMES": "true"}, ("auto", True)),
    ("{}", {"DPJOB_KUEUE_SHORT_WORKLOAD_NAMES": "false"}, ("auto", False)),
])
def test_the_integration_is_configured_like_every_setting_file_then_environment(file, environ, expected, tmp_path):
    from dpjob_operator.config import load_config

    path = tmp_path / "config.json"
    path.write_text(file)
    cfg = load_config(str(path), environ=environ)
    assert (cfg.kueue, cfg.kueue_short_workload_names) == expected
    with pytest.raises(ValueError, match="kueue must be one of auto, disabled"):
        load_config(str(path), environ={"DPJOB_KUEUE": "on"})


def test_with_short_workload_names_the_workload_is_named_as_kueue_then_names_it(monkeypatch):
    kube = FakeKube()
    it, _, _ = integration(kube, monkeypatch)
    it.short_names = True
    long_job = queued_job(builder=JobBuilder("resnet50-imagenet-ddp-sweep-learning-rate-warmup"))
    assert it.workload_name(long_job) == k.workload_name(long_job.name, long_job.uid, True)
    assert len(it.workload_name(long_job)) <= 63
