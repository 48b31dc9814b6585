"""Every metric family the operator and the trainer export, read from their live registries (not
from the source text), for docs/metrics.md and the test that keeps it complete."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    source: str  # "operator" | "trainer"
    name: str  # as scraped, without the _total/_bucket/... suffixes
    kind: str  # counter, gauge, histogram, info
    labels: tuple[str, ...]
    documentation: str


def _families(source: str, registry) -> list[Family]:  # type: ignore[no-untyped-def]
    out = []
    for metric in registry.collect():
        labels = sorted({k for s in metric.samples for k in s.labels if k not in ("le", "quantile")})
        out.append(Family(source, metric.name, metric.type, tuple(labels), metric.documentation))
    return out


def operator_families() -> list[Family]:
    from dpjob_operator import metrics

    statuses = [{"phase": "Running", "conditions": [
        {"type": "PodsScheduled", "status": "False", "reason": "GangUnschedulable"}]}]
    collectors = metrics.register_job_collectors(lambda: statuses)
    try:
        return _families("operator", metrics.REGISTRY)
    finally:
        for collector in collectors:
            metrics.REGISTRY.unregister(collector)


def trainer_families() -> list[Family]:
    from dpjob_trainer.metrics import TrainerMetrics
    from dpjob_trainer.stragglers import StepTimes

    m = TrainerMetrics()
    m.set_info(rank="0", backend="gloo")
    m.observe_step(duration=0.1, samples=8, data_wait=0.01, comm_exposed=0.01, loss=1.0, learning_rate=0.1,
                   grad_norm=1.0, epoch=0, timestamp=1.0, step=1, global_samples=16)
    m.set_total_steps(10)
    m.set_step_times(StepTimes(slowest_rank=1, slowest_seconds=0.2, median_seconds=0.1, straggler=None))
    m.set_checkpoint(1, 1.0)
    m.observe_checkpoint(0.5)
    m.observe_nonfinite_step()
    from dpjob_trainer.handshake import WarmCause

    m.set_warm_restarts(1)
    m.set_warm_cause(WarmCause(rank=1, exit_code=137, failed_at=1.0))
    return [f for f in _families("trainer", m.registry)
            if f.name.startswith("dpjob_")]  # process_* and python_gc_* are prometheus-client's own
