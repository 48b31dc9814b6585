"""``make dev``: the whole product on this machine, end to end.

Starts (or reuses) the local control plane, the node agent (rank pods become real processes),
the operator and Prometheus; applies examples/quickstart-cpu.yaml; shows progress while two
ranks train with torch DDP over gloo; prints the final status, training metrics and where to look.
Everything stays up afterwards for exploring; ``make cluster-down`` stops it all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import stack  # noqa: E402

NAMESPACE = "dpjob-dev"
EXAMPLE = REPO / "examples" / "quickstart-cpu.yaml"
PROM_PORT = 19090


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(stack.STATE / "bin" / "kubectl"), "--kubeconfig", str(stack.KUBECONFIG), *args],
                         input=stdin, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out


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
    raise SystemExit(f"namespace {name} is still terminating after {timeout:.0f}s")


def job_status(name: str) -> dict:
    out = kubectl("get", "dpj", name, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(out.stdout).get("status", {}) if out.returncode == 0 else {}


def trainer_progress(name: str) -> str:
    try:
        steps = stack.promql(PROM_PORT, f'max(dpjob_trainer_steps_total{{dpjob_job="{name}"}})')
        loss = stack.promql(PROM_PORT, f'max(dpjob_trainer_loss{{dpjob_job="{name}"}})')
    except OSError:
        return ""
    parts = []
    if steps:
        parts.append(f"step {float(steps[0]['value'][1]):.0f}")
    if loss:
        parts.append(f"loss {float(loss[0]['value'][1]):.4f}")
    return ", ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    t0 = time.monotonic()
    python = sys.executable

    say("starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
    subprocess.run([sys.executable, str(REPO / "devcluster" / "cluster.py"), "up", "--bin-dir", args.bin_dir,
                    "--python", python], check=True)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "crd/dataparalleljobs.dpjob.io", "--timeout=60s")
    say("starting the node agent (rank pods run as local processes, one network namespace each)")
    stack.start_agent(python, nodes=2)
    say("starting the operator (cpu pool -> the agent's nodes)")
    stack.start_operator(python)
    say(f"starting Prometheus on http://127.0.0.1:{PROM_PORT} (discovers trainer pods via the API server)")
    stack.start_prometheus(PROM_PORT)

    job = yaml.safe_load(EXAMPLE.read_text())
    name = job["metadata"]["name"]
    ensure_namespace(NAMESPACE)
    if kubectl("get", "dpj", name, "-n", NAMESPACE, check=False).returncode == 0:
        say(f"deleting the previous {name} job")
        kubectl("delete", "dpj", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    for stale in (Path("/tmp/dpjob") / NAMESPACE / name).glob("*"):
        subprocess.run(["rm", "-rf", str(stale)], check=False)
    say(f"applying {EXAMPLE.relative_to(REPO)} in namespace {NAMESPACE}")
    kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE))

    last = ""
    deadline = time.monotonic() + args.timeout
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

    print()
    say(f"{name}: {status.get('phase')} ({status.get('reason')}): {status.get('message')}")
    print(kubectl("get", "dpj", "-n", NAMESPACE, "-o", "wide").stdout)
    reports = sorted((Path("/tmp/dpjob") / NAMESPACE / name / "report").glob("report-rank*.json"))
    for path in reports:
        r = json.loads(path.read_text())
        print(f"    rank {r['rank']}/{r['world_size']} ({r['backend']}): {r['steps']} steps, {r['samples']} samples, "
              f"loss {r.get('initial_loss'):.4f} -> {r.get('final_loss'):.4f}, params sha256 {r['param_sha256'][:16]}")
    if len({json.loads(p.read_text())['param_sha256'] for p in reports}) == 1 and reports:
        print("    every rank ended with identical parameters (DDP kept them in sync)")
    try:
        rate = stack.promql(PROM_PORT, f'sum(max_over_time(dpjob_trainer_samples_total{{dpjob_job="{name}"}}[10m]))')
        if rate:
            print(f"    Prometheus saw {float(rate[0]['value'][1]):.0f} samples trained across ranks")
    except OSError:
        pass
    print(f"""
Where to look next:
  kubectl:     export KUBECONFIG={stack.KUBECONFIG} PATH={stack.STATE / 'bin'}:$PATH
               kubectl describe dpj {name} -n {NAMESPACE}      # conditions and events
  rank logs:   kubectl logs {name}-rank-0 -n {NAMESPACE}    (or: {sys.executable} -m devcluster.nodeagent logs {NAMESPACE}/{name}-rank-0 --state-dir {stack.AGENT_STATE})
  Prometheus:  http://127.0.0.1:{PROM_PORT}/graph?g0.expr=dpjob_trainer_loss
  dashboards:  helm/dpjob-operator/dashboards/*.json (import into Grafana, datasource = this Prometheus)
  operator:    {stack.LOGS / 'operator.log'}, metrics on http://127.0.0.1:18080/metrics
  stop all:    make cluster-down
make dev took {time.monotonic() - t0:.0f}s""")
    return 0 if status.get("phase") == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
