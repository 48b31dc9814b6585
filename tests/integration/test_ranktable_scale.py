"""Rank tables that scale, on the real control plane: the CRD's size bound at ``kubectl apply``,
a 1,100 x 8 table published on kwok nodes (indented, it would be over the 1 MiB ConfigMap limit),
and a table the API server refuses to store reported as ``RankTableWriteFailed``, never Ready."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client

from devcluster.cluster import PoolSpec, node_manifest
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.waits import TimedOut, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.side_stream]  # beside the others (devcluster/test.sh)

CONFIGMAP_LIMIT = 1024 * 1024


def _dry_run(api, namespace: str, body: dict) -> str | None:
    """None when the API server accepts ``body``, else its message (nothing is created)."""
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "dpjob.io", "v1alpha1", namespace, "dataparalleljobs", body, dry_run="All")
    except client.ApiException as e:
        return json.loads(e.body)["message"]
    return None


# (job, accepted?): the largest gangs the size model admits, and one pod more.
BOUND_CASES = [
    (JobBuilder().accelerator("gpu").replicas(1630).procs(8), True),
    (JobBuilder().accelerator("gpu").replicas(1631).procs(8), False),
    (JobBuilder().accelerator("cpu").replicas(1631).procs(8).set("rankTable", {"format": "none"}), True),
    (JobBuilder().accelerator("npu").replicas(1155).procs(8), True),
    (JobBuilder().accelerator("npu").replicas(1156).procs(8), False),
    (JobBuilder().accelerator("npu").replicas(1156).procs(8).set("rankTable", {"format": "generic"}), True),
    (JobBuilder().accelerator("cpu").replicas(100).procs(8).elastic(2, 1631), False),
]


@pytest.mark.parametrize(("builder", "accepted"), BOUND_CASES,
                         ids=["gpu-1630x8", "gpu-1631x8", "no-table", "npu-1155x8", "npu-1156x8",
                              "npu-generic-only", "elastic-max"])
def test_the_crd_refuses_a_gang_whose_rank_table_cannot_fit(api, crds, namespace, builder, accepted):
    message = _dry_run(api, namespace, builder.obj())
    if accepted:
        assert message is None
    else:
        assert message is not None and "would not fit in a ConfigMap" in message and "spec.replicas" in message


SCALE_TAINT = {"key": "dpjob.io/test-node", "value": "scale", "effect": "NoSchedule"}


@pytest.fixture()
def extra_cpu_nodes(core) -> Iterator[list[str]]:
    """Eleven more kwok nodes in the cpu pool: with the two of the dev cluster, room for 1,430 pods, so
    pods of earlier tests still being deleted cannot leave a rank of the 1,100 without a place."""
    pool = PoolSpec("cpu", 11, {"dpjob.io/pool": "cpu"}, [SCALE_TAINT], {})  # tainted: no other test's pods
    names = []
    for i in range(100, 111):
        manifest = node_manifest(pool, i)
        core.create_node(manifest)
        names.append(manifest["metadata"]["name"])
    yield names
    for name in names:
        core.delete_node(name)


def test_a_1100_by_8_rank_table_is_published_compact_on_kwok_nodes(api, core, namespace, operator,
                                                                      extra_cpu_nodes):
    replicas, procs = 1100, 8
    dpj.create(api, namespace, JobBuilder("big").replicas(replicas).procs(procs)
               .tolerate(SCALE_TAINT["key"], SCALE_TAINT["value"]).obj())

    def completed() -> dict | None:
        try:
            data = core.read_namespaced_config_map("big-ranktable", namespace).data or {}
        except client.ApiException:
            return None
        table = json.loads(data.get("ranktable.json", "{}"))
        rt = dpj.status(api, namespace, "big").get("rankTable") or {}
        return {"table": table, "text": data["ranktable.json"]} \
            if table.get("status") == "completed" and rt.get("ready") else None

    try:
        done = wait_until(completed, timeout=420, interval=2, what="the 1,100 x 8 table completed")
    except TimedOut as e:
        raise TimedOut(f"{e}\n{_diagnosis(api, core, namespace, 'big')}") from None
    table, text = done["table"], done["text"]
    assert table["worldSize"] == replicas * procs and len(table["servers"]) == replicas
    assert sorted(s["podIndex"] for s in table["servers"]) == list(range(replicas))
    assert [r["rank"] for s in sorted(table["servers"], key=lambda s: s["podIndex"]) for r in s["ranks"]] \
        == list(range(replicas * procs))
    assert len(json.dumps(table, indent=2).encode()) > CONFIGMAP_LIMIT > len(text.encode())  # fits only compact
    conds = {c["type"]: c for c in dpj.status(api, namespace, "big").get("conditions") or []}
    assert conds["RankTableReady"]["status"] == "True"
    dpj.delete(api, namespace, "big")
    wait_until(lambda: not dpj.rank_pods(core, namespace, "big"), timeout=300, interval=2, what="1,100 pods gone")


def _diagnosis(api, core, namespace: str, name: str) -> str:
    """What a stuck big job looks like: its pods by phase and node, why one waits, its status."""
    pods = dpj.rank_pods(core, namespace, name)
    phases = Counter((p.status.phase, bool(p.status.pod_ip)) for p in pods)
    pending = next((p for p in pods if p.status.phase == "Pending"), None)
    why = [(c.type, c.reason, c.message) for c in (pending.status.conditions or [])] if pending else []
    cpu_nodes = core.list_node(label_selector="dpjob.io/pool=cpu").items
    load = Counter(p.spec.node_name for p in core.list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed").items if p.spec.node_name)
    nodes = {n.metadata.name: (load[n.metadata.name], [c.type for c in n.status.conditions or []
                                                         if c.status == "True"]) for n in cpu_nodes}
    st = dpj.status(api, namespace, name)
    conditions = [(c["type"], c["status"], c.get("reason")) for c in st.get("conditions") or []]
    return (f"pods: {len(pods)} by (phase, has IP): {dict(phases)}; a pending pod's conditions: {why}; "
            f"cpu nodes (pods, true conditions): {nodes}; status: phase={st.get('phase')} "
            f"rankTable={st.get('rankTable')} conditions={conditions}")


def test_a_table_the_api_server_refuses_is_reported_and_written_once_allowed(api, core, namespace, operator):
    dpj.quota_full_of_configmaps(core, namespace, "no-configmaps")  # no room for the table
    dpj.create(api, namespace, JobBuilder().obj())

    def write_failed() -> dict | None:
        conds = {c["type"]: c for c in dpj.status(api, namespace, "train").get("conditions") or []}
        cond = conds.get("RankTableReady")
        return cond if cond and cond["reason"] == "RankTableWriteFailed" else None

    cond = wait_until(write_failed, timeout=60, what="RankTableReady=False/RankTableWriteFailed")
    assert cond["status"] == "False" and "train-ranktable" in cond["message"] and "quota" in cond["message"]
    dpj.wait_event(namespace, "train", "RankTableWriteFailed")
    assert not (dpj.status(api, namespace, "train").get("rankTable") or {}).get("ready")
    assert not dpj.rank_pods(core, namespace, "train")  # a pod would only wait for a missing volume
    core.delete_namespaced_resource_quota("no-configmaps", namespace)
    st = dpj.wait_status(api, namespace, "train", lambda s: (s.get("rankTable") or {}).get("ready") is True,
                         timeout=120, what="table written and Ready once the quota is gone")
    assert st["rankTable"]["configMaps"] == ["train-ranktable"]
