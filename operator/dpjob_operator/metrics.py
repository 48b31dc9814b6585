"""Operator metrics (design section 8): controller-runtime names so existing dashboards and
alerts for Go operators work unchanged, plus dpjob's own job-level series. No per-job labels:
job names are unbounded, phases and reasons are not."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from dpjob_operator.api.status import JobStatus

CONTROLLER = "dataparalleljob"
REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_TOTAL = Counter("controller_runtime_reconcile_total", "Reconciliations by result",
                          ["controller", "result"], registry=REGISTRY)
RECONCILE_ERRORS = Counter("controller_runtime_reconcile_errors_total", "Reconciliations that raised",
                           ["controller"], registry=REGISTRY)
# controller-runtime's own buckets, so a p99 from this histogram compares with any controller's
# (with the coarser 1 / 2.5 s bounds a p99 between them read as ~2.47 s whatever it was).
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
                     0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40,
                     50, 60)
RECONCILE_TIME = Histogram("controller_runtime_reconcile_time_seconds", "Time per reconciliation", ["controller"],
                           buckets=RECONCILE_BUCKETS, registry=REGISTRY)
WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Jobs waiting to be reconciled", ["name"], registry=REGISTRY)
WORKQUEUE_ADDS = Counter("workqueue_adds_total", "Jobs added to the work queue", ["name"], registry=REGISTRY)
REST_REQUESTS = Counter("rest_client_requests_total", "Kubernetes API requests by status code and method",
                        ["code", "method"], registry=REGISTRY)
# client-go's name and buckets: how long the API server took to answer, by verb. Under load this is
# where a slow pass goes (a busy API server), as against the operator's own CPU.
REQUEST_DURATION = Histogram("rest_client_request_duration_seconds", "Request latency by verb", ["verb"],
                             buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0),
                             registry=REGISTRY)
RATE_LIMITER_WAIT = Histogram("rest_client_rate_limiter_duration_seconds",
                              "Time spent waiting for the client-side rate limiter", ["verb"],
                              buckets=(0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                              registry=REGISTRY)
# client-go's name: 1 while this replica holds the leader Lease, 0 while it stands by.
LEADER = Gauge("leader_election_master_status", "1 when this replica leads, 0 when it stands by", ["name"],
               registry=REGISTRY)
PODS_CREATED = Counter("dpjob_pods_created_total", "Rank pods created", registry=REGISTRY)
PODS_DELETED = Counter("dpjob_pods_deleted_total", "Rank pods deleted by the operator", ["reason"],
                       registry=REGISTRY)
EVENTS_DROPPED = Counter("dpjob_events_dropped_total", "Events not posted because the event buffer was full",
                         registry=REGISTRY)
RESTARTS = Counter("dpjob_restarts_total", "Gang restarts by reason", ["reason"], registry=REGISTRY)
RESTARTS_BY_STRATEGY = Counter("dpjob_restarts_by_strategy_total",
                               "Gang restarts by how they ran: InPlace (the kubelet restarted the pods where they "
                               "are), Warm (the trainer replaced its training processes inside the containers) or "
                               "Recreate (new pods)", ["strategy"], registry=REGISTRY)
for _strategy in ("InPlace", "Warm", "Recreate"):  # both series exist from the start, so a rate() has a zero
    RESTARTS_BY_STRATEGY.labels(_strategy)
TRANSITIONS = Counter("dpjob_job_transitions_total", "Jobs entering a phase", ["phase"], registry=REGISTRY)
PROGRESS_READS = Counter("dpjob_progress_reads_total",
                         "Reads of rank 0's metrics endpoint for status.progress, by result: ok, no_step "
                         "(no step served yet), unreachable, invalid, refused (names another job or gang)",
                         ["result"], registry=REGISTRY)
_SCALE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
TIME_TO_CREATED = Histogram("dpjob_time_to_all_pods_created_seconds",
                            "From a gang's start (job seen or restart decided) to all its pods created",
                            buckets=_SCALE_BUCKETS, registry=REGISTRY)
TIME_TO_RUNNING = Histogram("dpjob_time_to_all_ranks_running_seconds",
                            "From a gang's start to all its ranks Running", buckets=_SCALE_BUCKETS,
                            registry=REGISTRY)
RECOVERY = Histogram("dpjob_gang_recovery_seconds",
                     "From a gang restart seen by the operator to all its ranks Running again, by strategy",
                     ["strategy"], buckets=_SCALE_BUCKETS, registry=REGISTRY)
RESTART_DETECT = Histogram("dpjob_restart_detect_seconds",
                           "From a rank's failure to the operator booking the gang restart, by strategy",
                           ["strategy"], buckets=_SCALE_BUCKETS, registry=REGISTRY)
RESTART_RECOVER = Histogram("dpjob_restart_recover_seconds",
                            "From a rank's failure to the new gang's first step (status.goodput), by strategy",
                            ["strategy"], buckets=_SCALE_BUCKETS, registry=REGISTRY)


class JobsByPhase:
    """``dpjob_jobs{phase}`` computed at scrape time from the controller's job cache."""

    PHASES = ("Pending", "Queued", "Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended")

    def __init__(self, phases: Callable[[], Iterable[str]]) -> None:
        self._phases = phases

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = dict.fromkeys(self.PHASES, 0)
        for phase in self._phases():
            counts[phase or "Pending"] = counts.get(phase or "Pending", 0) + 1
        family = GaugeMetricFamily("dpjob_jobs", "DataParallelJobs by phase", labels=["phase"])
        for phase, count in counts.items():
            family.add_metric([phase], count)
        yield family

    def describe(self) -> list[GaugeMetricFamily]:
        return []


class JobsUnschedulable:
    """``dpjob_jobs_unschedulable{reason}``: jobs whose ranks wait for nodes, computed at scrape time.

    ``GangUnschedulable``: the whole gang does not fit and holds nothing; ``Unschedulable``: ranks
    scheduled one by one, some of them placed. Both series always exist, so a panel shows 0, not
    "no data".
    """

    REASONS = ("Unschedulable", "GangUnschedulable")

    def __init__(self, statuses: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self._statuses = statuses

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = dict.fromkeys(self.REASONS, 0)
        for stored in self._statuses():
            status = JobStatus.from_dict(stored)
            cond = status.condition("PodsScheduled")
            waiting_elsewhere = status.phase in ("Succeeded", "Failed", "Suspended", "Queued")
            if cond is not None and cond.status == "False" and not waiting_elsewhere:
                reason = cond.reason or "Unschedulable"
                counts[reason] = counts.get(reason, 0) + 1
        family = GaugeMetricFamily("dpjob_jobs_unschedulable",
                                   "DataParallelJobs whose ranks wait for nodes, by reason", labels=["reason"])
        for reason, count in counts.items():
            family.add_metric([reason], count)
        yield family

    def describe(self) -> list[GaugeMetricFamily]:
        return []


def register_job_collectors(jobs: Callable[[], Iterable[Mapping[str, Any]]]) -> tuple[JobsByPhase, JobsUnschedulable]:
    """Scrape-time gauges over the job cache (``jobs``: the bodies to count; a job without a phase
    yet is Pending), registered; unregister them when the controller stops."""
    collectors = (JobsByPhase(lambda: [JobStatus.from_dict(b.get("status")).phase or "Pending" for b in jobs()]),
                  JobsUnschedulable(lambda: [b.get("status") or {} for b in jobs()]))
    for collector in collectors:
        REGISTRY.register(collector)
    return collectors
