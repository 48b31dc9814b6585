"""What warm restarts cost while nothing fails: the memory of the trainer's supervisor.

One rank of the trainer (``--task mlp``, gloo, no process group) runs on this host twice, with
``DPJOB_WARM_RESTARTS`` 0 (one process) and 2 (the supervisor and its training process,
dpjob_trainer/warm.py); after ``--seconds`` of training, the proportional set size (PSS: shared
pages split between the processes that share them) of all its processes is summed. Needs no cluster.

    python bench/bench_warm_memory.py            # prints one line per setting
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(warm: int, seconds: float) -> tuple[int, float]:
    """(processes, PSS MiB) of one rank training for ``seconds`` with ``warm`` warm restarts allowed."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer-image"), "DPJOB_WARM_RESTARTS": str(warm),
           "OMP_NUM_THREADS": "1", "DPJOB_BACKEND": "gloo"}
    proc = subprocess.Popen([sys.executable, "-m", "dpjob_trainer", "--task", "mlp", "--steps", "1000000",
                             "--log-every", "0", "--metrics-port", str(_free_port())], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(seconds)  # a fixed training time is what is measured, not a wait for an event
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False).stdout
        pids = [proc.pid, *(int(p) for p in out.split())]
        return len(pids), round(sum(pss_kib(p) for p in pids) / 1024, 1)
    finally:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="training time before the reading")
    args = parser.parse_args(argv)
    for warm in (0, 2):
        processes, mib = measure(warm, args.seconds)
        print(f"DPJOB_WARM_RESTARTS={warm}: {processes} process(es), PSS {mib} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
