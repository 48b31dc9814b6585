"""The per-job NetworkPolicy (builders/network_policy.py): made once per job, claimed by controller
UID like every child, deleted when the job opts out (``spec.isolation: None``), collected with the
job by the garbage collector. Remembered per job like the Service, so a steady job costs no call.

An operator whose ServiceAccount may not create NetworkPolicies (a chart without the rule) says so
once in its log and runs jobs without them: isolation is a guard, not a reason to stop training.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from dpjob_operator.api.spec import Job
from dpjob_operator.builders.network_policy import build_network_policy, network_policy_name, wants_network_policy
from dpjob_operator.config import OperatorConfig
from dpjob_operator.controller.blocking import Blocking
from dpjob_operator.controller.children import Claim, create_or_claim
from dpjob_operator.k8s import errors
from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.reconcile.claims import OURS, ownership

log = logging.getLogger("dpjob.controller")
GROUP, VERSION, PLURAL, KIND = "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"


class NetworkPolicies:
    def __init__(self, cfg: OperatorConfig, kube: KubeClient, blocking: Blocking, now: Callable[[], float]) -> None:
        self.kube, self.blocking, self._now = kube, blocking, now
        self.enabled = cfg.network_policy == "enabled"
        self.metrics_from = cfg.network_policy_metrics_from
        self.memo_seconds = 10 * cfg.resync_seconds
        self._memo: dict[str, tuple[bool, float]] = {}  # job uid -> (policy wanted, when made sure)

    async def ensure(self, job: Job, claim: Claim) -> None:
        if not self.enabled:
            return
        want = wants_network_policy(job, True)
        memo = self._memo.get(job.uid)
        if memo is not None and memo[0] == want and self._now() - memo[1] <= self.memo_seconds:
            return
        try:
            if want:
                await self._create(job, claim)
            else:
                await self._remove(job)
        except Exception as e:
            if errors.status_of(e) != 403 or errors.is_namespace_terminating(e):
                raise  # a namespace being deleted refuses everything: not a verdict on our RBAC
            self.enabled = False
            log.error("may not manage NetworkPolicies (RBAC: %s): jobs run without isolation; grant create, get "
                      "and delete on networking.k8s.io networkpolicies, or set networkPolicy.enabled=false",
                      errors.api_message(e))
            return
        self._memo[job.uid] = (want, self._now())

    async def _create(self, job: Job, claim: Claim) -> None:
        body = build_network_policy(job, self.metrics_from)
        create = functools.partial(self.blocking.run, self.kube.create_object, GROUP, VERSION, PLURAL, body)
        await create_or_claim(KIND, body["metadata"]["name"], create, self._reader(job), claim)

    async def _remove(self, job: Job) -> None:
        """The job opted out: delete our policy if there is one; anyone else's is left alone."""
        current = await self._reader(job)()
        if current is not None and ownership(current.get("metadata") or {}, job.uid, job.name) == OURS:
            await self.blocking.run(self.kube.delete_object, GROUP, VERSION, PLURAL, job.namespace,
                                    network_policy_name(job.name))

    def _reader(self, job: Job) -> Callable[[], Any]:
        return functools.partial(self.blocking.run, self.kube.get_object, GROUP, VERSION, PLURAL, job.namespace,
                                 network_policy_name(job.name))

    def forget(self, uid: str) -> None:
        self._memo.pop(uid, None)
