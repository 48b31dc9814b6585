"""A one-line trainer change to a running pod: push and pull through the dev registry, against
writing an OCI archive and importing it into the node's containerd, side by side in one run.

Each round writes a new one-line module into the trainer's package (a fresh marker, so the image's
input hash changes exactly as after an edit), then times, from the edit:

* ``registry``: ``devcluster/publish.py push trainer`` (build, push the changed layers, the node
  forgets its moved ``:cpu``), then a pod that names ``ghcr.io/dpjob/trainer:cpu`` on the real
  node, pulled through the node's mirror of ``ghcr.io``;
* ``archive``: ``devcluster/images.sh trainer`` (the same build), ``buildah push oci-archive:`` and
  ``ctr images import`` into the node's containerd, then a pod with ``imagePullPolicy: Never``.

Both end when the pod has printed the marker: the new code ran in a container. The module is
removed afterwards and the image pushed again, so the checkout and the registry end as they began.
Median over ``--reps`` rounds. Needs the dev cluster (``make cluster-up``).

Run: ``python bench/bench_dev_loop.py [--reps N]``; results in bench/results/dev_loop.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import cluster, publish, realnode, registry  # noqa: E402
from devcluster.kube import kubectl  # noqa: E402
from devcluster.waits import TimedOut, wait_until  # noqa: E402

MARK_FILE = REPO / "trainer-image" / "dpjob_trainer" / "_bench_mark.py"
RESULTS = REPO / "bench" / "results"


def run_pod(name: str, image: str, mark: str, pull: str, timeout: float = 300) -> None:
    """A pod on the real node that prints the marker from the trainer package; waits for its log."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"restartPolicy": "Never", "nodeSelector": {"dpjob.io/pool": realnode.POOL},
                    "tolerations": [realnode.TOLERATION],
                    "containers": [{"name": "trainer", "image": image, "imagePullPolicy": pull,
                                    "command": ["python", "-c",
                                                "import dpjob_trainer._bench_mark as m; print(m.MARK)"]}]}}
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    try:
        wait_until(lambda: mark in kubectl("logs", "-n", "default", name, check=False).stdout, timeout, 0.2,
                   what=f"pod {name} to print the marker")
    except TimedOut as e:
        raise SystemExit(f"bench: {e}") from None
    finally:
        kubectl("delete", "pod", "-n", "default", name, "--wait=false", check=False)


def edit(mark: str) -> None:
    MARK_FILE.write_text(f'MARK = "{mark}"\n')


def via_registry(mark: str) -> float:
    t0 = time.monotonic()
    edit(mark)
    subprocess.run([sys.executable, str(REPO / "devcluster" / "publish.py"), "push", "trainer"], check=True,
                   stdout=subprocess.DEVNULL)
    run_pod(f"devloop-registry-{mark[:8]}", f"{registry.PUBLIC_REPOSITORY}/trainer:cpu", mark, "IfNotPresent")
    return time.monotonic() - t0


def via_archive(mark: str) -> float:
    t0 = time.monotonic()
    edit(mark)
    [ref] = publish.build(["trainer"]).values()
    node = cluster.NODES[0]
    with tempfile.TemporaryDirectory(dir=registry.CACHE) as tmp:
        archive = Path(tmp) / "trainer.tar"
        subprocess.run([*publish.BUILDAH, "push", "--quiet", "--disable-compression", ref,
                        f"oci-archive:{archive}:{ref}"], check=True)
        realnode.ctr(node, "images", "import", str(archive))
    run_pod(f"devloop-archive-{mark[:8]}", ref, mark, "Never")
    return time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if not cluster.cluster_is_up() or not cluster.NODES:
        raise SystemExit("bench: the dev cluster with a real node is not up: make cluster-up")
    times: dict[str, list[float]] = {"registry": [], "archive": []}
    try:
        for _ in range(args.reps):
            times["registry"].append(via_registry(uuid.uuid4().hex))
            times["archive"].append(via_archive(uuid.uuid4().hex))
    finally:
        MARK_FILE.unlink(missing_ok=True)
        publish.build(["trainer"])
        cluster.built_images(("trainer",))  # the registry's :cpu is this checkout's build again
    result = {k: {"median_s": round(statistics.median(v), 1), "runs_s": [round(x, 1) for x in v]}
              for k, v in times.items()}
    result["archive_over_registry"] = round(result["archive"]["median_s"] / result["registry"]["median_s"], 2)
    result["registry_disk_bytes"] = registry.disk_usage()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dev_loop.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
