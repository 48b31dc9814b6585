"""Why pending, on the real node's kubelet: a rank whose image cannot be pulled and a rank whose
container cannot be created (a missing ConfigMap) make ``Waiting=True`` say so, in the kubelet's
words, with a Warning event, and the job never claims to be Running."""

from __future__ import annotations

import pytest

from devcluster import cluster as devcluster
from devcluster import stack
from tests.support import cluster as dpj
from tests.support.builders import JobBuilder
from tests.support.waits import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def real_node(cluster):
    if not devcluster.NODES:
        pytest.fail("the cluster has no real node (DPJOB_REAL_NODES=0): unset it and run `make cluster-down test`")


def _waiting(api, namespace: str, name: str, reason: str) -> dict | None:
    st = dpj.status(api, namespace, name)
    cond = next((c for c in st.get("conditions") or [] if c["type"] == "Waiting"), None)
    return cond if cond and cond["status"] == "True" and cond["reason"] == reason else None


CASES = [
    ("image", lambda b: b.image("dpjob.invalid/no-such-trainer:1"), "ImagePullError",
     ["rank 0", "dpjob.invalid/no-such-trainer:1"]),
    ("configmap", lambda b: b.image(stack.trainer_image()).set(
        "template.spec.containers", [{"name": "trainer", "image": stack.trainer_image(),
                                      "env": [{"name": "SETTING", "valueFrom": {"configMapKeyRef": {
                                          "name": "no-such-settings", "key": "x"}}}]}]),
     "ContainerConfigError", ["rank 0", "no-such-settings"]),
]


@pytest.mark.parametrize(("edit", "reason", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_rank_that_cannot_start_says_why(api, namespace, operator, edit, reason, words):
    builder = edit(JobBuilder("stuck").replicas(1).requests(cpu="100m", memory="128Mi"))
    dpj.create(api, namespace, stack.run_on_real_node(builder.obj()))
    cond = wait_until(lambda: _waiting(api, namespace, "stuck", reason), timeout=120, interval=1,
                      what=f"Waiting=True/{reason}")
    for word in words:
        assert word in cond["message"], cond["message"]
    dpj.wait_event(namespace, "stuck", reason)
    assert dpj.status(api, namespace, "stuck").get("phase") != "Running"
