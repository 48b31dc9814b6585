"""The cost of an idle pass: a Running job that has not changed, reconciled again (issue 13).

Every resync (30 s) and every event of any rank reconciles the whole job. With nothing changed a
pass should cost next to nothing; this measures the pure part of one (the observer's rank table
and the planner's decision; no API call is made on an idle pass) at sizes the CRD admits:
4,096 pods x 8 processes without a rank table, and the largest gangs with a generic (GPU) and an
HCCL (NPU) table. CPU milliseconds per pass, median of 20 passes, first pass (cold) apart.

Run: ``python bench/bench_idle_pass.py``. No cluster needed.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from dpjob_operator.api.pools import DEFAULT_POOLS  # noqa: E402
from dpjob_operator.builders.ranktable import ASCEND_DEVICE_ANNOTATION, max_servers  # noqa: E402
from dpjob_operator.controller.observer import RankTableMemo, rank_table_outcome  # noqa: E402
from dpjob_operator.reconcile.planner import plan_job  # noqa: E402
from tests.support.builders import JobBuilder, pod  # noqa: E402

PASSES = 20


def _ip(i: int, net: int) -> str:
    return f"10.{net}.{i // 256 % 256}.{i % 256}"


def _devices(i: int, n: int) -> dict[str, str]:
    return {ASCEND_DEVICE_ANNOTATION: json.dumps({
        "pod_name": f"train-rank-{i}", "server_id": _ip(i, 1), "host_ip": _ip(i, 1), "server_ip": _ip(i, 1),
        "devices": [{"device_id": str(d), "device_ip": _ip(i * 16 + d, 2)} for d in range(n)]})}


def scenario(label: str, accelerator: str, replicas: int, procs: int, table: str) -> dict:
    builder = JobBuilder().replicas(replicas).procs(procs).accelerator(accelerator).set("rankTable",
                                                                                       {"format": table})
    if accelerator == "npu":
        builder.set("devicesPerReplica", procs)
    job = builder.job()
    pods = [pod(i, owner_uid=job.uid, pod_ip=_ip(i, 3), host_ip=_ip(i, 1),
                annotations=_devices(i, procs) if accelerator == "npu" else {}) for i in range(replicas)]
    def passes(table_for) -> list[float]:
        status: dict = {"phase": "Running", "restarts": 0, "conditions": []}
        now = datetime.now(UTC)
        costs = []
        for _ in range(PASSES + 1):
            t0 = time.process_time()
            outcome = table_for(job, 0, pods)
            plan = plan_job(job, status, pods, now, DEFAULT_POOLS[accelerator], outcome)
            costs.append((time.process_time() - t0) * 1000)
            status = {**status, **plan.status}
        return costs

    memo = RankTableMemo()
    cached, rebuilt = passes(memo.outcome), passes(rank_table_outcome)
    return {"scenario": label, "pods": replicas, "procs": procs, "table": table,
            "cold_ms": round(cached[0], 1), "idle_ms_median": round(statistics.median(cached[1:]), 2),
            "idle_ms_rebuilding_the_table": round(statistics.median(rebuilt[1:]), 2)}


def main() -> int:
    rows = [scenario("4096 x 8, no rank table", "gpu", 4096, 8, "none"),
            scenario(f"{max_servers(8, hccl=False)} x 8, generic table", "gpu", max_servers(8, hccl=False), 8,
                     "generic"),
            scenario(f"{max_servers(8, hccl=True)} x 8, hccl table", "npu", max_servers(8, hccl=True), 8, "hccl")]
    print(f"{'scenario':32s} {'cold pass ms':>13s} {'idle pass ms':>13s} {'idle, table rebuilt ms':>23s}")
    for r in rows:
        print(f"{r['scenario']:32s} {r['cold_ms']:13.1f} {r['idle_ms_median']:13.2f} "
              f"{r['idle_ms_rebuilding_the_table']:23.2f}")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "idle_pass.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
