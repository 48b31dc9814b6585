"""Restart placement on the real control plane: a rank fails on a node a health tool has tainted;
the restarted gang carries a required affinity away from that node and status says why."""

from __future__ import annotations

import pytest

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import wait_pods
from tests.support.kwok import fail_pod
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration
TAINT = {"key": "health.dpjob.io/xid-79", "value": "true", "effect": "NoSchedule"}


def test_the_gang_restarted_after_a_failure_on_a_tainted_node_avoids_it(api, core, namespace, operator):
    dpj.create(api, namespace, JobBuilder("place").replicas(2).obj())
    dpj.wait_phase(api, namespace, "place", "Running", timeout=90)
    rank1 = next(p for p in wait_pods(core, namespace, "place", 2) if p.metadata.name == "place-rank-1")
    node = rank1.spec.node_name
    before = core.read_node(node).spec.taints or []
    core.patch_node(node, {"spec": {"taints": [*[t.to_dict() for t in before], TAINT]}})
    try:
        fail_pod(core, namespace, "place-rank-1")
        st = dpj.wait_status(api, namespace, "place", lambda s: s.get("restarts") == 1, timeout=60,
                             what="the gang restarted after rank 1 failed")
        assert st["avoidNodes"] == {"restart": 1, "nodes": [node],
                                    "reason": f"node {node} is tainted {TAINT['key']}"}
        # The restart's own words are in its event (the status message moves on as the new gang starts).
        restarts = [e["message"] for e in dpj.wait_event(namespace, "place", "GangRestart")]
        assert any(f"the next gang avoids it (node {node} is tainted" in m for m in restarts), restarts

        def next_gang() -> list | None:
            pods = [p for p in dpj.rank_pods(core, namespace, "place")
                    if p.metadata.labels.get("dpjob.io/restart") == "1"]
            return pods if len(pods) == 2 else None

        for pod in wait_until(next_gang, timeout=60, what="the next gang's pods"):
            terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution \
                .node_selector_terms
            assert any(e.key == "kubernetes.io/hostname" and e.operator == "NotIn" and e.values == [node]
                       for t in terms for e in t.match_expressions), pod.metadata.name
        dpj.wait_phase(api, namespace, "place", "Running", timeout=90)
        assert all(p.spec.node_name != node for p in dpj.rank_pods(core, namespace, "place"))
    finally:
        core.patch_node(node, {"spec": {"taints": [t.to_dict() for t in before] or None}})
