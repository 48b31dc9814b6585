"""The per-job NetworkPolicy on the real API server: made before the pods, owned by the job,
deleted when the job opts out, never adopted from someone else; rank pods carry no token."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.cluster import wait_pods
from tests.support.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)
RANKS = {"dpjob.io/job-name": "iso", "app.kubernetes.io/managed-by": "dpjob-operator"}


def read_policy(net: client.NetworkingV1Api, namespace: str, name: str):
    try:
        return net.read_namespaced_network_policy(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def test_a_job_is_isolated_by_its_own_policy_until_it_opts_out(api, core, namespace, operator):
    net = client.NetworkingV1Api(api)
    job = dpj.create(api, namespace, JobBuilder("iso").replicas(2).obj())
    pods = wait_pods(core, namespace, "iso", 2)
    policy = read_policy(net, namespace, "iso")
    assert policy is not None, "the rank pods run without their policy"
    owner = policy.metadata.owner_references[0]
    assert (owner.uid, owner.controller, owner.kind) == (job["metadata"]["uid"], True, "DataParallelJob")
    assert policy.spec.pod_selector.match_labels == RANKS and policy.spec.policy_types == ["Ingress"]
    assert [peer.pod_selector.match_labels for rule in policy.spec.ingress for peer in rule._from] == [RANKS], \
        "only the job's own pods (the test operator is configured with no scrapers)"
    assert all(p.spec.automount_service_account_token is False for p in pods)

    dpj.patch(api, namespace, "iso", {"spec": {"isolation": "None"}})
    wait_until(lambda: read_policy(net, namespace, "iso") is None, timeout=30, what="the policy deleted on opt-out")


def test_a_policy_of_the_jobs_name_that_is_not_ours_blocks_the_pods_and_is_left_alone(api, core, namespace,
                                                                                    operator):
    net = client.NetworkingV1Api(api)
    theirs = client.V1NetworkPolicy(metadata=client.V1ObjectMeta(name="taken"),
                                    spec=client.V1NetworkPolicySpec(pod_selector=client.V1LabelSelector()))
    net.create_namespaced_network_policy(namespace, theirs)
    dpj.create(api, namespace, JobBuilder("taken").replicas(1).obj())
    st = dpj.wait_status(api, namespace, "taken", lambda s: any(
        c["reason"] == "NetworkPolicyNameConflict" for c in s.get("conditions") or []), what="the conflict reported")
    assert not dpj.rank_pods(core, namespace, "taken"), "a rank ran without isolation"
    assert f"NetworkPolicy {namespace}/taken" in next(c["message"] for c in st["conditions"]
                                         if c["reason"] == "NetworkPolicyNameConflict")
    assert not read_policy(net, namespace, "taken").metadata.owner_references, "someone else's policy was adopted"
