"""The chart's Kueue integration: one value (``kueue.integration``) reaches the operator's config, and
the RBAC it needs is granted with it and only with it: the job's Workloads in the namespaces the
operator watches, and the cluster-scoped reads (ResourceFlavors, priority classes) also for a
namespaced install, through a ClusterRole of their own."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.helm import by_kind, helm_binary, render, template

pytestmark = pytest.mark.unit
needs_helm = pytest.mark.skipif(
    helm_binary() is None and not os.environ.get("CI"),
    reason="no helm binary (devcluster/build.sh builds one); under CI=true the tests fail instead")

#: What the operator does to its Workloads (controller/kueue.py): create, watch, patch (the object and
#: its status), delete when replaced; update on finalizers for the ownerReference's blockOwnerDeletion.
KUEUE_RULES = ({("kueue.x-k8s.io", "workloads", v)
                for v in ("create", "get", "list", "watch", "update", "patch", "delete")}
               | {("kueue.x-k8s.io", "workloads/status", v) for v in ("get", "update", "patch")}
               | {("kueue.x-k8s.io", "workloads/finalizers", "update")})
#: Cluster-scoped, read only.
KUEUE_CLUSTER_RULES = ({("kueue.x-k8s.io", r, v) for r in ("resourceflavors", "workloadpriorityclasses")
                        for v in ("get", "list", "watch")}
                       | {("scheduling.k8s.io", "priorityclasses", v) for v in ("get", "list", "watch")})


def granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [c for c in by_kind(objs, "ConfigMap") if "config.json" in c.get("data", {})]
    loaded: dict[str, Any] = json.loads(cm["data"]["config.json"])
    return loaded


@needs_helm
@pytest.mark.parametrize("values, mode, short", [
    ({}, "auto", False),
    ({"kueue": {"integration": "disabled"}}, "disabled", False),
    ({"kueue": {"shortWorkloadNames": True}}, "auto", True),
])
def test_the_kueue_value_is_what_the_operator_reads(values, mode, short, tmp_path: Path):
    from dpjob_operator.config import load_config

    cfg = config(render(values=values))
    assert (cfg["kueue"], cfg["kueueShortWorkloadNames"]) == (mode, short)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    loaded = load_config(str(path), environ={})
    assert (loaded.kueue, loaded.kueue_short_workload_names) == (mode, short)


@needs_helm
def test_a_cluster_wide_install_grants_the_kueue_rules_in_its_cluster_role_and_drops_them_when_disabled():
    name = "dpjob-dpjob-operator"
    (role,) = [r for r in by_kind(render(), "ClusterRole") if r["metadata"]["name"] == name]
    assert granted(role) >= KUEUE_RULES | KUEUE_CLUSTER_RULES
    assert not any(r["metadata"]["name"] == f"{name}-kueue" for r in by_kind(render(), "ClusterRole"))
    (off,) = [r for r in by_kind(render(set_=["kueue.integration=disabled"]), "ClusterRole")
              if r["metadata"]["name"] == name]
    assert not {g for g, _, _ in granted(off)} & {"kueue.x-k8s.io"}
    assert ("scheduling.k8s.io", "priorityclasses", "get") not in granted(off)


@needs_helm
def test_a_namespaced_install_grants_workloads_per_namespace_and_the_cluster_reads_apart():
    objs = render(values={"watchNamespaces": ["team-a", "team-b"]})
    roles = [r for r in by_kind(objs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    assert len(roles) == 2 and all(granted(r) >= KUEUE_RULES for r in roles)
    assert not any(KUEUE_CLUSTER_RULES & granted(r) for r in roles)   # a Role cannot grant them
    (reads,) = [r for r in by_kind(objs, "ClusterRole") if r["metadata"]["name"] == "dpjob-dpjob-operator-kueue"]
    assert granted(reads) == KUEUE_CLUSTER_RULES
    (binding,) = [b for b in by_kind(objs, "ClusterRoleBinding") if b["roleRef"]["name"] == reads["metadata"]["name"]]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "dpjob-dpjob-operator",
                                    "namespace": "dpjob-system"}]


@needs_helm
@pytest.mark.parametrize("bad", ["kueue.integration=on", "kueue.enabled=true", "kueue.shortWorkloadNames=maybe"])
def test_the_schema_rejects_a_kueue_typo(bad: str):
    proc = template(set_=[bad], check=False)
    assert proc.returncode != 0, f"--set {bad} was accepted"
