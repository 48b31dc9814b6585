"""Pure: the flags of ``dpjob run`` -> a DataParallelJob and the ConfigMap that carries the script.

Nothing here talks to a cluster, so ``dpjob run --dry-run`` prints exactly what ``dpjob run``
creates, and the unit tests pin the launch command for every framework and process count.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from dpjob_cli.pack import Packed
from dpjob_operator.api import constants as c
from dpjob_operator.api import kueue

SOURCE_MOUNT = "/dpjob/src"  # where the packed files appear in every rank container (read-only)
SOURCE_VOLUME = "dpjob-src"
DEPS_DIR = "/tmp/dpjob-deps"  # pip --target for --requirements; /tmp is writable in the trainer image
CREATED_BY = "dpjob-cli"
ANNOTATION_SCRIPT = "dpjob.io/script"
LABEL_SOURCE_OF = "dpjob.io/source-of"
# The trainer images the examples and the chart name; the dev cluster has the cpu one under this name.
DEFAULT_IMAGES = {"cpu": "ghcr.io/dpjob/trainer:cpu", "gpu": "ghcr.io/dpjob/trainer:cuda",
                  "npu": "ghcr.io/dpjob/trainer:npu"}
_NAME_UNSAFE = re.compile(r"[^a-z0-9]+")
_MAX_STEM = 30


@dataclass(frozen=True)
class RunOptions:
    """Everything ``dpjob run`` (and ``Client.run``) accepts, already parsed."""

    script: str  # path as typed; with in_image, the path inside the image
    args: tuple[str, ...] = ()
    name: str | None = None
    namespace: str = "default"
    replicas: int = 1
    procs: int = 1
    accelerator: str = "cpu"
    framework: str = "pytorch"
    image: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    cpu: str | None = None
    memory: str | None = None
    backoff_limit: int = 0
    in_image: bool = False
    queue: str | None = None     # a Kueue LocalQueue: the job waits until Kueue admits it
    priority: str | None = None  # a Kueue WorkloadPriorityClass

    @property
    def effective_image(self) -> str:
        return self.image or DEFAULT_IMAGES[self.accelerator]


def job_name_for(script: str, suffix: str | None = None) -> str:
    """A DNS-1035 job name from the script's file name plus a random suffix: ``train.py`` -> ``train-x7k2p``."""
    stem = _NAME_UNSAFE.sub("-", PurePosixPath(script).stem.lower()).strip("-")[:_MAX_STEM].strip("-")
    if not stem or not stem[0].isalpha():
        stem = f"job-{stem}".strip("-")
    alphabet = string.ascii_lowercase + string.digits
    suffix = suffix if suffix is not None else "".join(secrets.choice(alphabet) for _ in range(5))
    return f"{stem}-{suffix}"


def source_configmap_name(job_name: str) -> str:
    return f"{job_name}-src"


def _literal(arg: str) -> str:
    """Kubernetes expands ``$(VAR)`` in command and args; ``$$`` keeps a user's ``$(...)`` literal."""
    return arg.replace("$(", "$$(")


def launch_command(opts: RunOptions, script_path: str) -> list[str]:
    """The rank container's command: the framework's launcher around the user's script.

    One process per pod runs the script directly (the operator sets RANK, WORLD_SIZE, MASTER_*);
    several use the launcher that spawns them from the operator's PET_* / MS_* / DPJOB_* variables.
    """
    args = [_literal(a) for a in opts.args]
    if opts.framework == "mindspore":
        return ["msrun", "--worker_num=$(MS_WORKER_NUM)", "--local_worker_num=$(MS_LOCAL_WORKER)",
                "--master_addr=$(MS_SCHED_HOST)", "--master_port=$(MS_SCHED_PORT)",
                "--node_rank=$(MS_NODE_RANK)", "--join=True", script_path, *args]
    if opts.procs == 1:
        return ["python", script_path, *args]
    if opts.framework == "oneflow":
        return ["python", "-m", "oneflow.distributed.launch", "--nproc_per_node", "$(DPJOB_NPROC_PER_NODE)",
                "--nnodes", "$(DPJOB_REPLICAS)", "--node_rank", "$(DPJOB_NODE_RANK)",
                "--master_addr", "$(DPJOB_MASTER_ADDR)", "--master_port", "$(DPJOB_MASTER_PORT)", script_path, *args]
    return ["torchrun", script_path, *args]  # torchrun reads PET_NNODES, PET_NODE_RANK, PET_MASTER_* itself


def _with_requirements(command: list[str]) -> list[str]:
    """Install the requirements into a writable folder first, then exec the launcher unchanged."""
    shell = (f'pip install --quiet --no-cache-dir --target {DEPS_DIR} -r "$DPJOB_REQUIREMENTS" && '
             f'PYTHONPATH="{DEPS_DIR}${{PYTHONPATH:+:$PYTHONPATH}}" exec "$0" "$@"')
    return ["sh", "-c", shell, *command]


def _container(opts: RunOptions, packed: Packed | None) -> dict[str, Any]:
    script_path = opts.script if packed is None else f"{SOURCE_MOUNT}/{packed.entry}"
    command = launch_command(opts, script_path)
    env = [{"name": k, "value": v} for k, v in opts.env]
    if packed is not None:
        env.insert(0, {"name": "DPJOB_SRC", "value": SOURCE_MOUNT})
        if packed.requirements:
            command = _with_requirements(command)
            env.insert(1, {"name": "DPJOB_REQUIREMENTS", "value": f"{SOURCE_MOUNT}/{packed.requirements}"})
    container: dict[str, Any] = {"name": c.TRAINER_CONTAINER, "image": opts.effective_image, "command": command}
    if env:
        container["env"] = env
    requests = {k: v for k, v in (("cpu", opts.cpu), ("memory", opts.memory)) if v}
    if requests:
        container["resources"] = {"requests": requests}
    if packed is not None:
        container["volumeMounts"] = [{"name": SOURCE_VOLUME, "mountPath": SOURCE_MOUNT, "readOnly": True}]
    return container


def build_job(opts: RunOptions, name: str, packed: Packed | None) -> dict[str, Any]:
    """The DataParallelJob ``dpjob run`` creates; ``packed`` None runs a script baked into the image."""
    pod_spec: dict[str, Any] = {"containers": [_container(opts, packed)]}
    if packed is not None:
        items = [{"key": key, "path": path} for key, path in packed.items]
        pod_spec["volumes"] = [{"name": SOURCE_VOLUME,
                                "configMap": {"name": source_configmap_name(name), "items": items}}]
    labels = {"app.kubernetes.io/created-by": CREATED_BY}
    if opts.queue:
        labels[kueue.LABEL_QUEUE_NAME] = opts.queue
    if opts.priority:
        labels[kueue.LABEL_PRIORITY_CLASS] = opts.priority
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels,
                     "annotations": {ANNOTATION_SCRIPT: opts.script}},
        "spec": {
            "replicas": opts.replicas,
            "procsPerReplica": opts.procs,
            "accelerator": opts.accelerator,
            "framework": opts.framework,
            "runPolicy": {"backoffLimit": opts.backoff_limit},
            "template": {"spec": pod_spec},
        },
    }


def build_source_configmap(job: dict[str, Any], packed: Packed) -> dict[str, Any]:
    """The ConfigMap of the packed files, owned by ``job`` once it has a uid (garbage-collected with it)."""
    meta = job["metadata"]
    cm_meta: dict[str, Any] = {"name": source_configmap_name(meta["name"]), "namespace": meta["namespace"],
                               "labels": {LABEL_SOURCE_OF: meta["name"], "app.kubernetes.io/created-by": CREATED_BY}}
    if meta.get("uid"):
        cm_meta["ownerReferences"] = [{"apiVersion": c.API_VERSION, "kind": c.KIND, "name": meta["name"],
                                       "uid": meta["uid"], "controller": False, "blockOwnerDeletion": False}]
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": cm_meta}
    if packed.data:
        body["data"] = dict(packed.data)
    if packed.binary_data:
        body["binaryData"] = dict(packed.binary_data)
    return body
