"""Fluent builders for tests (JobSet's MakeJobSet(...).Obj() style), instead of YAML blobs."""

from __future__ import annotations

import copy
from typing import Any

from dpjob_operator.api.spec import Job, parse_job
from dpjob_operator.reconcile.observe import PodObservation


class JobBuilder:
    def __init__(self, name: str = "train", namespace: str = "ns") -> None:
        self._body: dict[str, Any] = {
            "apiVersion": "dpjob.io/v1alpha1", "kind": "DataParallelJob",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1},
            "spec": {"replicas": 2, "accelerator": "cpu",
                     "template": {"spec": {"containers": [{"name": "trainer", "image": "dpjob/trainer:cpu",
                                                           "command": ["python", "-m", "dpjob_trainer"]}]}}},
        }

    def set(self, path: str, value: Any) -> "JobBuilder":
        node = self._body["spec"]
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
        return self

    def replicas(self, n: int) -> "JobBuilder":
        return self.set("replicas", n)

    def procs(self, n: int) -> "JobBuilder":
        return self.set("procsPerReplica", n)

    def accelerator(self, a: str) -> "JobBuilder":
        return self.set("accelerator", a)

    def framework(self, f: str) -> "JobBuilder":
        return self.set("framework", f)

    def elastic(self, lo: int, hi: int) -> "JobBuilder":
        return self.set("rendezvous", {"mode": "elastic", "minReplicas": lo, "maxReplicas": hi})

    def run_policy(self, **kw: Any) -> "JobBuilder":
        self._body["spec"].setdefault("runPolicy", {}).update(kw)
        return self

    def user_env(self, **env: str) -> "JobBuilder":
        ctr = self._body["spec"]["template"]["spec"]["containers"][0]
        ctr["env"] = [{"name": k, "value": v} for k, v in env.items()]
        return self

    def body(self) -> dict[str, Any]:
        return copy.deepcopy(self._body)

    def obj(self) -> Job:
        return parse_job(self._body)


def pod(index: int, phase: str = "Running", restart: int = 0, job: str = "train", **kw: Any) -> PodObservation:
    defaults: dict[str, Any] = {"ready": phase == "Running", "node": f"node-{index}",
                                "pod_ip": f"10.244.0.{index + 1}"}
    defaults.update(kw)
    return PodObservation(name=f"{job}-rank-{index}", uid=f"pod-uid-{index}", index=index, restart=restart,
                          phase=phase, **defaults)
