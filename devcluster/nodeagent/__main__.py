"""CLI: ``python -m devcluster.nodeagent [run] --kubeconfig PATH ...`` runs the agent;
``python -m devcluster.nodeagent logs <namespace>/<pod> [-c container] [-f]`` prints container logs.
Also runnable as ``python devcluster/nodeagent/__main__.py``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``devcluster.nodeagent`` importable
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent.parent))
    __package__ = "devcluster.nodeagent"

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_STATE = REPO / ".devcluster" / "agent"
DEFAULT_KUBECONFIG = REPO / ".devcluster" / "kubeconfig"


def _pairs(text: str, what: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        if "=" not in item:
            raise argparse.ArgumentTypeError(f"{what}: expected k=v, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def run_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or str(DEFAULT_KUBECONFIG))
    p.add_argument("--nodes", type=int, default=1, help="how many nodes to register (default 1)")
    p.add_argument("--name-prefix", default="local", help="nodes are <prefix>-0, <prefix>-1, ...")
    p.add_argument("--pool", default="local", help="value of the dpjob.io/pool label")
    p.add_argument("--state-dir", default=str(DEFAULT_STATE), help="IPAM state, pod dirs, logs, cert")
    p.add_argument("--bridge", default="dpjob0")
    p.add_argument("--cidr", default="10.250.0.0/16", help="pod IPs; the bridge gets the first address")
    p.add_argument("--python", default=sys.executable,
                   help="python interpreter whose directory goes first on the pods' PATH")
    p.add_argument("--labels", default="", help="extra node labels k=v,k=v")
    p.add_argument("--capacity", action="append", default=[],
                   help="extra node capacity, e.g. nvidia.com/gpu=8 (repeatable, or comma separated)")
    p.add_argument("--env", action="append", default=[],
                   help="extra default env for every container, K=V (repeatable); pod env wins")
    p.add_argument("--taint", dest="taint", action="store_true", default=True,
                   help="taint nodes dpjob.io/agent=true:NoSchedule (default)")
    p.add_argument("--no-taint", dest="taint", action="store_false")
    p.add_argument("--delete-nodes-on-exit", action=argparse.BooleanOptionalAction, default=True,
                   help="delete the nodes on exit (default); otherwise mark them NotReady")
    p.add_argument("--kubelet-port", type=int, default=10250,
                   help="HTTPS port for kubectl logs on the bridge IP (0 disables)")
    p.add_argument("--cluster-domain", default="cluster.local")
    p.add_argument("--ready-file", default=None, help="written (JSON) once the nodes accept pods; removed on exit")
    p.add_argument("--sync-period", type=float, default=1.0, help="seconds between ConfigMap/Secret volume refreshes")
    p.add_argument("-v", "--verbose", action="store_true")


def cmd_run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s nodeagent %(levelname)s %(message)s")
    for noisy in ("urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if os.geteuid() != 0:
        print("the node agent needs root (network namespaces, bind mounts)", file=sys.stderr)
        return 2
    from devcluster.nodeagent.agent import Agent, AgentConfig

    capacity: dict[str, str] = {}
    for c in args.capacity:
        capacity.update(_pairs(c, "--capacity"))
    env: dict[str, str] = {}
    for e in args.env:
        if "=" not in e:
            raise SystemExit(f"--env: expected K=V, got {e!r}")
        k, v = e.split("=", 1)
        env[k] = v
    cfg = AgentConfig(
        kubeconfig=args.kubeconfig, nodes=args.nodes, name_prefix=args.name_prefix, pool=args.pool,
        state_dir=Path(args.state_dir), bridge=args.bridge, cidr=args.cidr,
        python_dir=str(Path(args.python).parent), labels=_pairs(args.labels, "--labels"), capacity=capacity,
        taint=args.taint, delete_nodes_on_exit=args.delete_nodes_on_exit, kubelet_port=args.kubelet_port,
        extra_env=env, cluster_domain=args.cluster_domain,
        ready_file=Path(args.ready_file) if args.ready_file else None, sync_period=args.sync_period)
    agent = Agent(cfg)

    def on_signal(signum, _frame):
        logging.getLogger("nodeagent").info("got signal %d", signum)
        agent.stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.start()
        agent.run_forever()
    finally:
        agent.shutdown()
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from devcluster.nodeagent.logserver import log_file, stream_log

    ns, _, pod = args.pod.rpartition("/")
    ns = ns or args.namespace
    try:
        path = log_file(Path(args.state_dir) / "logs", ns, pod, args.container)
        if not path.exists():
            raise FileNotFoundError(f"no log file {path}")
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 1
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    try:
        stream_log(path, write, follow=args.follow, tail_lines=args.tail if args.tail >= 0 else None)
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["logs"]:
        p = argparse.ArgumentParser(prog="python -m devcluster.nodeagent logs",
                                    description="print a container's log kept by the node agent")
        p.add_argument("pod", help="<namespace>/<pod> or <pod> (with -n)")
        p.add_argument("-n", "--namespace", default="default")
        p.add_argument("-c", "--container", default=None)
        p.add_argument("-f", "--follow", action="store_true", help="keep printing until the container exits")
        p.add_argument("--tail", type=int, default=-1, help="only the last N lines")
        p.add_argument("--state-dir", default=str(DEFAULT_STATE))
        return cmd_logs(p.parse_args(argv[1:]))
    if argv[:1] == ["run"]:
        argv = argv[1:]
    p = argparse.ArgumentParser(prog="python -m devcluster.nodeagent",
                                description="dpjob node agent: registers nodes and runs their pods as local "
                                            "processes (subcommands: run [default], logs)")
    run_parser(p)
    return cmd_run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
