"""Restart in place: the container restart rules and the generation counter of a rank pod (pure).

A trainer that can (the built-in one: dpjob_trainer/warm.py) restarts faster still, without the
kubelet: ``DPJOB_WARM_RESTARTS`` and ``DPJOB_WARM_RESTART_EXITS`` let its supervisor replace the
training process inside the running container for the same retriable exits (reconcile/warm_restarts.py
books those restarts).

With ``status.restartStrategy: InPlace`` a retriable exit of the trainer makes the kubelet restart
every container of that pod where it is (``RestartAllContainers``, Kubernetes 1.36): same pod,
node, IP and volumes, no scheduling. Which exits are retriable is the job's own contract:

- ``OnFailure``: any non-zero exit;
- ``ExitCode``: the trainer's "lost a peer" exit (75) and 128-255 (a signal: SIGKILL, an OOM kill);
  1-127 are permanent and never restart in place: the pod fails and the failure policy decides;
- ``Never`` never gets here (``reconcile/inplace.py`` resolves it to Recreate).

A pod's environment cannot change in place, so ``DPJOB_RESTART_COUNT`` stays at the generation the
pod was created in. The init container ``dpjob-restart-count`` runs again at every in-place restart
(init containers do) and counts the restarts into a file on a memory-backed emptyDir, which
survives them; ``DPJOB_RESTART_COUNT_FILE`` names it, and the trainer adds it to the generation. It
also says in its termination message how the trainer's previous run ended (``previous exit: N``):
after an in-place restart the kubelet reports every container as killed (137,
``RestartingAllContainers``), so this is how the operator learns the real exit code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpjob_operator.api import constants as c
from dpjob_operator.api.restart_counter import (
    COUNT_FILE,
    COUNTER_CONTAINER,
    EXIT_RECORD,
    PREVIOUS_EXIT,
    RUN_DIR,
    RUN_VOLUME,
    RUNNING_MARK,
)

RESTART_ACTION = "RestartAllContainers"
WARM_BUDGET_ENV = "DPJOB_WARM_RESTARTS"
WARM_EXITS_ENV = "DPJOB_WARM_RESTART_EXITS"
EXIT_PEER_LOST = 75

# Count this start; then say how the trainer's previous run ended: its own record, or killed (137)
# when it was running and left none (SIGKILL, an OOM kill), or unknown (a program that records nothing).
COUNTER_SCRIPT = (
    f'n=$(cat {COUNT_FILE} 2>/dev/null || echo -1); n=$((n + 1)); echo "$n" > {COUNT_FILE}; m=""; '
    f'if [ -s {EXIT_RECORD} ]; then m="{PREVIOUS_EXIT}$(cat {EXIT_RECORD})"; '
    f'elif [ -e {RUNNING_MARK} ]; then m="{PREVIOUS_EXIT}137"; '
    f'elif [ "$n" -gt 0 ]; then m="{PREVIOUS_EXIT}unknown"; fi; '
    f'rm -f {EXIT_RECORD} {RUNNING_MARK}; '
    f'if [ -n "$m" ]; then echo "$m" > /dev/termination-log; fi'
)


def restart_rules(restart_policy: str) -> list[dict[str, Any]]:
    """The trainer container's ``restartPolicyRules`` for the job's restart policy."""
    if restart_policy == "ExitCode":
        exits: dict[str, Any] = {"operator": "In", "values": [EXIT_PEER_LOST, *range(128, 256)]}
    else:
        exits = {"operator": "NotIn", "values": [0]}
    return [{"action": RESTART_ACTION, "exitCodes": exits}]


def counter_container(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """The init container that counts in-place restarts: the trainer's image (it has a shell, and is
    already on the node), its pull policy and security context, its cpu and memory (so the pod asks
    for nothing more), no devices."""
    container: dict[str, Any] = {
        "name": COUNTER_CONTAINER,
        "image": trainer.get("image", ""),
        "command": ["sh", "-c", COUNTER_SCRIPT],
        "volumeMounts": [{"name": RUN_VOLUME, "mountPath": RUN_DIR}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    for key in ("imagePullPolicy", "securityContext"):
        if key in trainer:
            container[key] = trainer[key]
    resources = {kind: {name: value for name, value in (amounts or {}).items() if name in ("cpu", "memory")}
                 for kind, amounts in (trainer.get("resources") or {}).items() if kind in ("requests", "limits")}
    resources = {kind: amounts for kind, amounts in resources.items() if amounts}
    if resources:
        container["resources"] = resources
    return container


def warm_exits(restart_policy: str) -> str:
    """``DPJOB_WARM_RESTART_EXITS``: the same retriable exits as the restart rules, for the trainer."""
    return f"{EXIT_PEER_LOST},128-255" if restart_policy == "ExitCode" else "nonzero"


def apply_in_place(pod_spec: dict[str, Any], restart_policy: str, backoff_limit: int) -> None:
    """Give the trainer container its restart rules, the counter and the file it writes, and let a
    trainer that can restart warm do so (``DPJOB_WARM_RESTARTS``: at most ``backoffLimit`` per
    container; the operator books each against the job's budget from rank 0's metrics)."""
    trainer = next((ct for ct in pod_spec.get("containers", []) if ct.get("name") == c.TRAINER_CONTAINER), None)
    if trainer is None:
        return
    trainer["restartPolicy"] = "Never"  # a container with rules must name its own policy
    user_rules = [rule for rule in trainer.get("restartPolicyRules") or [] if rule.get("action") != RESTART_ACTION]
    trainer["restartPolicyRules"] = [*user_rules, *restart_rules(restart_policy)]
    mounts = list(trainer.get("volumeMounts") or [])
    if not any(m.get("mountPath") == RUN_DIR for m in mounts):
        trainer["volumeMounts"] = [*mounts, {"name": RUN_VOLUME, "mountPath": RUN_DIR}]
    given = {e.get("name") for e in trainer.get("env") or []}
    warm = {WARM_BUDGET_ENV: str(backoff_limit), WARM_EXITS_ENV: warm_exits(restart_policy)}
    # A template that sets DPJOB_WARM_RESTARTS itself keeps it ("0": no warm restarts, the memory of
    # the supervisor's preloaded modules saved; the kubelet still restarts in place).
    ours = {"DPJOB_RESTART_COUNT_FILE": COUNT_FILE, **({} if WARM_BUDGET_ENV in given else warm)}
    env = [e for e in trainer.get("env") or [] if e.get("name") not in ours]
    trainer["env"] = [*env, *({"name": name, "value": value} for name, value in ours.items())]
    others = [ct for ct in pod_spec.get("initContainers") or [] if ct.get("name") != COUNTER_CONTAINER]
    pod_spec["initContainers"] = [counter_container(trainer), *others]
    volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != RUN_VOLUME]
    pod_spec["volumes"] = [*volumes, {"name": RUN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]
