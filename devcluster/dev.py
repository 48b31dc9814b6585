"""``make dev``: the whole product on this machine, the way a user runs it.

Starts (or reuses) the local cluster with a real node (kubelet + containerd) and an OCI registry,
builds the images and pushes them and the chart to that registry, installs the operator from it
with ``helm install dpjob oci://...`` as a pod the kubelet pulled, starts Prometheus 3 (it discovers
pods through the API server), applies examples/quickstart-cpu.yaml unchanged, shows progress
while two rank containers train with torch DDP over gloo (rendezvous over cluster DNS), then
prints the status, each rank's result from ``kubectl logs`` and where to look.
Everything stays up afterwards for exploring; ``make cluster-down`` stops it all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import cluster, doctor, publish, registry, stack  # noqa: E402
from devcluster.kube import kubectl  # noqa: E402

NAMESPACE = "dpjob-dev"
EXAMPLE = REPO / "examples" / "quickstart-cpu.yaml"
PROM_PORT = 19090


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def fail(msg: str) -> None:
    """One clear line instead of a traceback."""
    print(f"make dev: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)



def ensure_namespace(name: str, timeout: float = 120) -> None:
    """Create the namespace, first waiting out a previous one that is still terminating."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = kubectl("get", "namespace", name, "-o", "jsonpath={.status.phase}", check=False)
        if out.returncode != 0:
            kubectl("create", "namespace", name)
            return
        if out.stdout == "Active":
            return
        time.sleep(1)
    fail(f"namespace {name} is still terminating after {timeout:.0f}s")


def job_status(name: str) -> dict:
    out = kubectl("get", "dpj", name, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(out.stdout).get("status", {}) if out.returncode == 0 else {}


def trainer_progress(name: str) -> str:
    try:
        steps = stack.promql(PROM_PORT, f'max(dpjob_trainer_steps_total{{dpjob_job="{name}"}})')
        loss = stack.promql(PROM_PORT, f'max(dpjob_trainer_loss{{dpjob_job="{name}"}})')
    except (OSError, ValueError):
        return ""
    parts = []
    if steps:
        parts.append(f"step {float(steps[0]['value'][1]):.0f}")
    if loss:
        parts.append(f"loss {float(loss[0]['value'][1]):.4f}")
    return ", ".join(parts)


def rank_results(name: str, ranks: int) -> list[dict]:
    """Each rank's ``done`` line, read with ``kubectl logs`` as a user would."""
    results = []
    for rank in range(ranks):
        out = kubectl("logs", "-n", NAMESPACE, f"{name}-rank-{rank}", "-c", "trainer", check=False)
        for line in reversed(out.stdout.splitlines()):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "done":
                results.append({"rank": rank, **event})
                break
    return results


def control_plane_up() -> bool:
    return all(cluster.alive(cluster.read_pid(c)) for c in cluster.CONTROL_PLANE)


SIMULATION = "SIMULATION"


def simulate(args: argparse.Namespace, t0: float) -> int:
    """The real node could not start here: run the quickstart on kwok nodes instead, and say at
    every step that nothing runs. The operator is a process (a pod on kwok would not run either)
    and the ranks only *look* Running; they "succeed" after 15 s (sim.dpjob.io/complete-after)."""
    banner = (f"{SIMULATION}: the real node (kubelet + containerd) could not start on this machine (the lines "
              "above say why). Falling back to kwok nodes: the operator runs as a process, the rank pods only "
              "LOOK Running, no container runs and nothing trains.")
    say(banner)
    env = {**os.environ, "DPJOB_REAL_NODES": "0"}
    if subprocess.run([sys.executable, str(REPO / "devcluster" / "cluster.py"), "up", "--bin-dir", args.bin_dir,
                       "--python", sys.executable], env=env).returncode != 0:
        fail("the control plane did not come up either")
    stack.apply_crds()
    if not cluster.alive(cluster.read_pid("operator")):
        cluster.start("operator", [sys.executable, "-m", "dpjob_operator"],
                      env={"KUBECONFIG": str(cluster.KUBECONFIG), "PYTHONPATH": stack.source_pythonpath(),
                           "DPJOB_METRICS_PORT": "18080", "DPJOB_HEALTH_PORT": "18081", "PYTHONUNBUFFERED": "1",
                           "DPJOB_METRICS_BIND_ADDRESS": "127.0.0.1", "DPJOB_HEALTH_BIND_ADDRESS": "127.0.0.1",
                           "DPJOB_METRICS_AUTH": "none"})
    job = yaml.safe_load(EXAMPLE.read_text())
    name = job["metadata"]["name"]
    job["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[
        "sim.dpjob.io/complete-after"] = "15s"
    ensure_namespace(NAMESPACE)
    kubectl("delete", "dpj", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s")
    say(f"{SIMULATION}: applying {EXAMPLE.relative_to(REPO)} onto kwok nodes")
    kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(job))
    status: dict = {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and status.get("phase") not in ("Succeeded", "Failed"):
        status = job_status(name)
        print(f"    [{time.monotonic() - t0:6.1f}s] {SIMULATION} phase {status.get('phase', '-')}", flush=True)
        time.sleep(3)
    print(kubectl("get", "dpj", "-n", NAMESPACE, "-o", "wide").stdout)
    say(banner)
    say(f"{SIMULATION} only: the operator's logic ran, nothing trained. Fix the real node and re-run `make dev`.")
    return 3


def link_cli() -> None:
    """``dpjob``, ``kubectl-dpj`` and its completion ``kubectl_complete-dpj`` beside kubectl and helm in
    .devcluster/bin: one PATH entry."""
    for tool in ("dpjob", "kubectl-dpj", "kubectl_complete-dpj"):
        link, target = cluster.BIN / tool, Path(sys.executable).parent / tool
        if target.exists():
            link.unlink(missing_ok=True)
            link.symlink_to(target)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--timeout", type=float, default=900)
    return parser.parse_args()


def start_cluster(args: argparse.Namespace) -> bool:
    """Start (or reuse) the cluster with its real node; False when only the real node failed, so
    the run falls back to a simulation. Any other failure ends the run with one clear line."""
    say("starting the cluster: control plane, kwok node pools and a real node (kubelet + containerd); "
        "the first run builds the images (several minutes)")
    up = subprocess.run([sys.executable, str(REPO / "devcluster" / "cluster.py"), "up", "--bin-dir", args.bin_dir,
                         "--python", sys.executable])
    if up.returncode != 0:
        if cluster.NODES and control_plane_up():
            return False
        fail("the cluster did not come up (the line above says which step failed and how to fix it)")
    say("built and cached (reused by every later run and by make test):")
    for line in doctor.cache_summary():
        print(f"    {line}", flush=True)
    if not cluster.NODES:
        fail("DPJOB_REAL_NODES=0: this cluster has no node that runs containers, so no job can train; "
             "unset it (the kwok pools only simulate pods)")
    return True


def install_stack() -> None:
    """The CRDs, the CLI beside kubectl, the operator from the registry and Prometheus."""
    stack.apply_crds()
    link_cli()
    say(f"installing the operator from the registry: helm install {stack.RELEASE} "
        f"oci://{registry.DEV_REPOSITORY}/charts/dpjob-operator --version {publish.source_version()} "
        f"-n {stack.OPERATOR_NAMESPACE}")
    image = stack.install_operator()
    say(f"operator Ready ({image})")
    say(f"starting Prometheus 3 on http://127.0.0.1:{PROM_PORT} (discovers the operator and trainer pods "
        "through the API server)")
    stack.cluster_prometheus(PROM_PORT)


def apply_example(name: str) -> None:
    """Apply the quickstart unchanged, as a user would, replacing a job left by an earlier run."""
    ensure_namespace(NAMESPACE)
    if kubectl("get", "dpj", name, "-n", NAMESPACE, check=False).returncode == 0:
        say(f"deleting the previous {name} job")
        kubectl("delete", "dpj", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    say(f"kubectl apply -n {NAMESPACE} -f {EXAMPLE.relative_to(REPO)}")
    kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE))


def follow(name: str, timeout: float, t0: float) -> dict:
    """Print the job's progress as it changes until it ends or ``timeout`` passes; its last status."""
    last = ""
    deadline = time.monotonic() + timeout
    status: dict = {}
    gang_said = False
    while time.monotonic() < deadline:
        status = job_status(name)
        if status.get("gang") and not gang_said:
            gang = status["gang"]
            say(f"scheduled all-or-nothing: PodGroup {gang['podGroup']} (minCount {gang['minCount']}), "
                "Kubernetes' own gang scheduling")
            gang_said = True
        line = (f"phase {status.get('phase', '-'):10s} ready {status.get('ready', '-'):5s} "
                f"restarts {status.get('restarts', 0)}  {trainer_progress(name)}")
        if line != last:
            print(f"    [{time.monotonic() - t0:6.1f}s] {line}", flush=True)
            last = line
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(2)
    return status


def report(name: str, ranks: int, status: dict) -> None:
    """The outcome as a user would check it: the job, its pods, each rank's log, Prometheus."""
    print()
    say(f"{name}: {status.get('phase')} ({status.get('reason')}): {status.get('message')}")
    print(kubectl("get", "dpj", "-n", NAMESPACE, "-o", "wide").stdout)
    print(kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout)
    results = rank_results(name, ranks)
    for r in results:
        print(f"    rank {r['rank']}: {r['steps']} steps, final loss {r['final_loss']:.4f}, "
              f"params sha256 {r['param_sha256'][:16]}  (kubectl logs {name}-rank-{r['rank']})")
    if len(results) == ranks and len({r["param_sha256"] for r in results}) == 1:
        print("    every rank ended with identical parameters (DDP kept them in sync)")
    try:
        seen = stack.promql(PROM_PORT, f'sum(max_over_time(dpjob_trainer_samples_total{{dpjob_job="{name}"}}[10m]))')
        if seen:
            print(f"    Prometheus saw {float(seen[0]['value'][1]):.0f} samples trained across ranks")
    except (OSError, ValueError):
        pass


def where_to_look(name: str, t0: float) -> None:
    bin_dir = cluster.BIN
    print(f"""
Where to look next:
  kubectl:     export KUBECONFIG={cluster.KUBECONFIG} PATH={bin_dir}:$PATH   # kubectl, helm, dpjob
               kubectl describe dpj {name} -n {NAMESPACE}      # conditions and events
               dpjob list -n {NAMESPACE}                       # the CLI
               kubectl logs {name}-rank-0 -n {NAMESPACE}       # a rank's log (a real container)
  operator:    kubectl -n {stack.OPERATOR_NAMESPACE} logs deploy/{stack.OPERATOR_DEPLOYMENT}
               helm -n {stack.OPERATOR_NAMESPACE} status {stack.RELEASE}
  registry:    http://{registry.HOST}/v2/_catalog (images and the chart; make push, make release)
  Prometheus:  http://127.0.0.1:{PROM_PORT}/api/v1/query?query=dpjob_trainer_loss  (HTTP API; the web UI's
               assets are not built here)
  dashboards:  helm/dpjob-operator/dashboards/*.json (import into Grafana, datasource = this Prometheus)
  stop all:    make cluster-down
make dev took {time.monotonic() - t0:.0f}s""")


def main() -> int:
    args = parse_args()
    t0 = time.monotonic()
    if not start_cluster(args):
        return simulate(args, t0)
    install_stack()
    job = yaml.safe_load(EXAMPLE.read_text())
    name = job["metadata"]["name"]
    ranks = int(job["spec"]["replicas"])
    apply_example(name)
    status = follow(name, args.timeout, t0)
    report(name, ranks, status)
    where_to_look(name, t0)
    return 0 if status.get("phase") == "Succeeded" else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        sys.exit(main())
    except RuntimeError as e:  # kubectl, helm or Prometheus failed: one clear line, not a traceback
        fail(str(e))
