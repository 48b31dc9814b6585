"""The chart's API Priority and Fairness setting for leader election: the operator's Lease
requests go to their own priority level, so a 429 storm on its reconcile traffic cannot cost it
the Lease (tests/chaos/test_apf_storm.py runs that storm with this FlowSchema)."""

from __future__ import annotations

import os

import pytest

from tests.support.helm import by_kind, helm_binary, render, template

pytestmark = [pytest.mark.unit, pytest.mark.skipif(
    helm_binary() is None and not os.environ.get("CI"),
    reason="no helm binary (devcluster/build.sh builds one); under CI=true the tests fail instead")]


def test_by_default_the_operators_lease_requests_go_to_the_leader_election_level():
    (schema,) = by_kind(render(namespace="ml-platform"), "FlowSchema")
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": "leader-election"}
    # After the built-in workload-leader-election (200), before the service-accounts schema (9000).
    assert 200 < spec["matchingPrecedence"] < 9000
    (rule,) = spec["rules"]
    assert rule["subjects"] == [{"kind": "ServiceAccount", "serviceAccount": {
        "name": "dpjob-dpjob-operator", "namespace": "ml-platform"}}]
    # Only the Lease, only where it lives: the rest of the operator's traffic keeps its own level.
    assert rule["resourceRules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                      "verbs": ["get", "create", "update"], "namespaces": ["ml-platform"]}]


@pytest.mark.parametrize("setting", ["leaderElection.priorityLevel=", "leaderElection.enabled=false"])
def test_no_flow_schema_when_asked_for_none_or_without_leader_election(setting):
    assert by_kind(render(set_=[setting]), "FlowSchema") == []


@pytest.mark.parametrize("bad", ["leaderElection.priorityLevel=Leader_Election",
                                 "leaderElection.flowSchemaPrecedence=0",
                                 "leaderElection.flowSchemaPrecedence=10001"])
def test_an_invalid_priority_level_or_precedence_fails_the_install(bad):
    proc = template(set_=[bad], check=False)
    assert proc.returncode != 0 and "leaderElection" in proc.stderr, proc.stderr
