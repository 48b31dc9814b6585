"""Fluent builders for tests (JobSet's ``MakeJobSet(...).Obj()`` style) instead of hand-written dicts.

One builder serves every layer: ``.job()`` is the parsed model a unit test feeds the pure
builders and the planner, ``.served()`` the object as the API server returns it, ``.obj()`` the
DataParallelJob a test creates on the real cluster. The defaults are the smallest valid job:
two CPU ranks of ``dpjob/trainer:cpu`` running ``python -m dpjob_trainer``.
"""

from __future__ import annotations

import copy
from typing import Any

from dpjob_operator.api.observed import PodObservation
from dpjob_operator.api.spec import Job, parse_job

API_VERSION, KIND = "dpjob.io/v1alpha1", "DataParallelJob"
# The dev cluster's kwok stages read these pod annotations (devcluster/): a simulated run's end.
SIM_COMPLETE_AFTER = "sim.dpjob.io/complete-after"
SIM_FAIL_AFTER, SIM_EXIT_CODE = "sim.dpjob.io/fail-after", "sim.dpjob.io/exit-code"


class JobBuilder:
    """A DataParallelJob under construction; every setter returns the builder."""

    def __init__(self, name: str = "train", namespace: str = "ns") -> None:
        self.name, self.namespace = name, namespace
        self._spec: dict[str, Any] = {
            "replicas": 2, "accelerator": "cpu",
            "template": {"spec": {"containers": [{"name": "trainer", "image": "dpjob/trainer:cpu",
                                                  "command": ["python", "-m", "dpjob_trainer"]}]}}}

    # ---- spec -------------------------------------------------------------------------------

    def set(self, path: str, value: Any) -> JobBuilder:
        """Set ``spec.<path>`` (dotted), creating the maps on the way."""
        node = self._spec
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
        return self

    def update_spec(self, fields: dict[str, Any]) -> JobBuilder:
        """Replace whole top-level spec fields (an invalid-spec table states them as they are)."""
        self._spec.update(copy.deepcopy(fields))
        return self

    def replicas(self, n: int) -> JobBuilder:
        return self.set("replicas", n)

    def procs(self, n: int) -> JobBuilder:
        return self.set("procsPerReplica", n)

    def accelerator(self, a: str) -> JobBuilder:
        return self.set("accelerator", a)

    def framework(self, f: str) -> JobBuilder:
        return self.set("framework", f)

    def elastic(self, lo: int, hi: int) -> JobBuilder:
        return self.set("rendezvous", {"mode": "elastic", "minReplicas": lo, "maxReplicas": hi})

    def run_policy(self, **kw: Any) -> JobBuilder:
        """Merge into ``spec.runPolicy`` (``backoffLimit=1``, ``suspend=True``, ...)."""
        self._spec.setdefault("runPolicy", {}).update(kw)
        return self

    # ---- pod template -----------------------------------------------------------------------

    def _pod_spec(self) -> dict[str, Any]:
        pod_spec: dict[str, Any] = self._spec["template"].setdefault("spec", {})
        return pod_spec

    def _trainer(self) -> dict[str, Any]:
        return next(c for c in self._pod_spec()["containers"] if c["name"] == "trainer")

    def image(self, image: str) -> JobBuilder:
        self._trainer()["image"] = image
        return self

    def command(self, command: list[str]) -> JobBuilder:
        self._trainer()["command"] = list(command)
        return self

    def args(self, args: list[str]) -> JobBuilder:
        """The trainer container's args (the trainer's CLI flags)."""
        self._trainer()["args"] = list(args)
        return self

    def requests(self, **requests: str) -> JobBuilder:
        """The trainer container's resource requests (``cpu="300m", memory="512Mi"``)."""
        self._trainer().setdefault("resources", {})["requests"] = dict(requests)
        return self

    def user_env(self, **env: str) -> JobBuilder:
        self._trainer()["env"] = [{"name": k, "value": v} for k, v in env.items()]
        return self

    def pod_annotations(self, annotations: dict[str, str]) -> JobBuilder:
        """Annotations of the pod template (every rank pod carries them)."""
        self._spec["template"].setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        return self

    def completes_after(self, delay: str) -> JobBuilder:
        """On the dev cluster's simulated nodes every rank exits 0 after ``delay`` ("2s")."""
        return self.pod_annotations({SIM_COMPLETE_AFTER: delay})

    def fails_after(self, delay: str, exit_code: int | None = None) -> JobBuilder:
        """On the dev cluster's simulated nodes every rank fails after ``delay`` (with ``exit_code``)."""
        self.pod_annotations({SIM_FAIL_AFTER: delay})
        return self if exit_code is None else self.pod_annotations({SIM_EXIT_CODE: str(exit_code)})

    def node_selector(self, selector: dict[str, str]) -> JobBuilder:
        self._pod_spec()["nodeSelector"] = dict(selector)
        return self

    def tolerate(self, key: str, value: str, effect: str = "NoSchedule") -> JobBuilder:
        """Tolerate the taint ``key=value:effect``."""
        self._pod_spec().setdefault("tolerations", []).append(
            {"key": key, "operator": "Equal", "value": value, "effect": effect})
        return self

    # ---- results ----------------------------------------------------------------------------

    def obj(self) -> dict[str, Any]:
        """The DataParallelJob to create: ready for ``create_namespaced_custom_object`` or ``kubectl apply``
        (no namespace, uid or generation: the request and the server set those)."""
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": self.name},
                "spec": copy.deepcopy(self._spec)}

    def served(self) -> dict[str, Any]:
        """The object as the API server serves it to the operator: namespace, uid and generation set."""
        body = self.obj()
        body["metadata"].update({"namespace": self.namespace, "uid": f"uid-{self.name}", "generation": 1})
        return body

    def job(self) -> Job:
        """The parsed model the operator's pure layers take."""
        return parse_job(self.served())


def pod(index: int, phase: str = "Running", restart: int = 0, job: str = "train", **kw: Any) -> PodObservation:
    """What the operator observes of rank ``index``'s pod; ready when Running unless told otherwise."""
    defaults: dict[str, Any] = {"ready": phase == "Running", "node": f"node-{index}",
                                "pod_ip": f"10.244.0.{index + 1}", "owner_uid": f"uid-{job}"}
    defaults.update(kw)
    return PodObservation(name=f"{job}-rank-{index}", uid=f"pod-uid-{index}", index=index, restart=restart,
                          phase=phase, **defaults)
