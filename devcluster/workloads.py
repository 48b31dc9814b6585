"""What a job needs to run on the real nodes: the images built from this checkout, in the dev
registry, and a pod shape that lands on a real node as a hardened container.

Used through devcluster/stack.py by ``make dev``, the end-to-end tests and the benchmarks.
"""

from __future__ import annotations

from pathlib import Path

from devcluster import cluster, realnode

# Rank pods' shared directory on the real node: checkpoints outlive the pods (a PVC on a real
# cluster) and the tests read the trainers' reports from it.
SHARED_DIR = Path("/tmp/dpjob")


def run_on_real_node(job: dict) -> dict:
    """Place a DataParallelJob's ranks on the real node(s), whatever the operator's pools say, as a
    hardened container: non-root, read-only root filesystem, no capabilities. The node's
    ``/tmp/dpjob`` is mounted at the same path (checkpoints outlive pods; tests read reports)."""
    SHARED_DIR.mkdir(parents=True, exist_ok=True)
    SHARED_DIR.chmod(0o1777)  # the trainer runs as uid 10001
    spec = job["spec"]["template"].setdefault("spec", {})
    spec.setdefault("nodeSelector", {})["dpjob.io/pool"] = realnode.POOL
    tolerations = spec.setdefault("tolerations", [])
    if realnode.TOLERATION not in tolerations:
        tolerations.append(dict(realnode.TOLERATION))
    volumes = spec.setdefault("volumes", [])
    if not any(v["name"] == "dpjob-shared" for v in volumes):
        volumes += [{"name": "dpjob-shared", "hostPath": {"path": str(SHARED_DIR), "type": "Directory"}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
    for container in spec.get("containers", []):
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("securityContext", {
            "runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
        mounts = container.setdefault("volumeMounts", [])
        if not any(m["name"] == "dpjob-shared" for m in mounts):
            mounts += [{"name": "tmp", "mountPath": "/tmp"}, {"name": "dpjob-shared", "mountPath": str(SHARED_DIR)}]
    return job


def node_images(*names: str) -> dict[str, str]:
    """Build (or reuse) these images and push them to the dev registry: name -> reference.

    The reference is the image's immutable ``dev-<name>-<key>`` tag: a pod can never run a build
    older than this checkout's, and the kubelet pulls it from the registry on first use."""
    return cluster.built_images(names)


def trainer_image() -> str:
    """The trainer image built from trainer-image/Dockerfile, in the dev registry."""
    return node_images("trainer")["trainer"]


def trainer_mindspore_image() -> str:
    """The MindSpore trainer image (trainer-image/Dockerfile.mindspore), in the dev registry under
    its own reference and the public name examples/mindspore-cpu.yaml uses. Built on first use
    only: it is a few GB that no other test needs."""
    return node_images("trainer-mindspore")["trainer-mindspore"]


def with_trainer_image(job: dict) -> dict:
    for container in job["spec"]["template"]["spec"].get("containers", []):
        if container.get("name") == "trainer":
            container["image"] = trainer_image()
    return job
