"""Typed, immutable view of a DataParallelJob, parsed from the custom resource's dict.

The CRD schema applies defaults and CEL rules before the operator sees an object, so parsing
here is mostly a typed copy. ``SpecError`` covers what the schema cannot know, and is turned
into a status condition and an Event, never an exception loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpjob_operator.api import constants as c


class SpecError(ValueError):
    """The job cannot be realised as written; the message tells the user what to change."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field_path = field_path


@dataclass(frozen=True)
class Rendezvous:
    mode: str = "static"
    port: int = 29500
    timeout_seconds: int = 900
    min_replicas: int | None = None
    max_replicas: int | None = None
    max_restarts: int = 3
    dns_records: str = "rank0"  # rank0 | allRanks: which ranks the headless Service publishes


@dataclass(frozen=True)
class RankTableSpec:
    format: str = "auto"
    hccl_version: str = "auto"
    super_pod_size: int | None = None
    mount_path: str = c.RANKTABLE_MOUNT_PATH
    mindx_compatible: bool = False


@dataclass(frozen=True)
class RunPolicy:
    restart_policy: str = "OnFailure"
    backoff_limit: int = 3
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: str = "Running"
    suspend: bool = False
    gang_scheduling: str = "Auto"   # Auto: a Kubernetes PodGroup when the cluster serves one | Disabled
    # Auto | InPlace | Recreate: how a retriable failure restarts the gang (reconcile/inplace.py)
    restart_strategy: str = "Auto"
    # The stall watchdog (reconcile/stall.py): no step for this long while Running (None: off) ...
    stall_timeout_seconds: int | None = None
    # ... or no first step this long after all ranks started running (None: off) ...
    startup_timeout_seconds: int | None = None
    stall_policy: str = "Restart"   # ... then: Restart (a gang restart) | Fail | None (condition and event only)
    # A rank this many times slower than the median is a straggler (the trainer's --straggler-factor); None:
    # the trainer's default.
    straggler_factor: float | None = None


@dataclass(frozen=True)
class JobSpec:
    replicas: int
    procs_per_replica: int
    devices_per_replica: int
    accelerator: str
    framework: str
    backend: str | None  # None: the node pool's defaultBackend (see builders.env.effective_backend)
    inject_env_into: str
    rendezvous: Rendezvous
    rank_table: RankTableSpec
    run_policy: RunPolicy
    success_policy: str
    template: Mapping[str, Any]
    # Node label whose value every rank must share (a rack, an NVLink domain, a SuperPoD), or None.
    topology_key: str | None = None
    isolation: str = "Job"  # Job: the operator's NetworkPolicy admits only the job's pods (builders/network_policy.py)

    @property
    def world_size(self) -> int:
        return self.replicas * self.procs_per_replica


@dataclass(frozen=True)
class Job:
    """Identity plus spec: everything the pure builders need about one DataParallelJob."""

    name: str
    namespace: str
    uid: str
    generation: int
    spec: JobSpec
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    creation_timestamp: str | None = None
    deleting: bool = False

    @property
    def owner_reference(self) -> dict[str, Any]:
        return {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}


ACCELERATORS = ("gpu", "npu", "cpu")


def parse_job(body: Mapping[str, Any]) -> Job:
    """Parse a DataParallelJob dict (as served by the API server) into a ``Job``.

    Raises ``SpecError`` for what the CRD could not reject, e.g. an object stored before a
    schema change, so that the caller can report it instead of crashing.
    """
    meta = body.get("metadata", {})
    spec = body.get("spec") or {}
    accelerator = spec.get("accelerator", "cpu")
    if accelerator not in ACCELERATORS:
        raise SpecError("spec.accelerator", f"must be one of gpu, cpu, npu, got {accelerator!r}")
    procs = int(spec.get("procsPerReplica", 1))
    default_devices = 0 if accelerator == "cpu" else procs
    devices = int(spec.get("devicesPerReplica", default_devices))
    template = spec.get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    if not any(ctr.get("name") == c.TRAINER_CONTAINER for ctr in containers):
        raise SpecError("spec.template.spec.containers", "needs a container named 'trainer'")
    replicas = int(spec.get("replicas", 1))
    if replicas < 1:
        raise SpecError("spec.replicas", f"must be >= 1, got {replicas}")
    return Job(
        name=meta["name"],
        namespace=meta.get("namespace", "default"),
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 0)),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        creation_timestamp=meta.get("creationTimestamp"),
        deleting=bool(meta.get("deletionTimestamp")),
        spec=JobSpec(
            replicas=replicas,
            procs_per_replica=procs,
            devices_per_replica=devices,
            accelerator=accelerator,
            framework=spec.get("framework", "pytorch"),
            backend=spec.get("backend") or None,
            inject_env_into=spec.get("injectEnvInto", "trainer"),
            isolation=spec.get("isolation", "Job"),
            rendezvous=_rendezvous(spec.get("rendezvous") or {}),
            rank_table=_rank_table(spec.get("rankTable") or {}),
            run_policy=_run_policy(spec.get("runPolicy") or {}),
            success_policy=spec.get("successPolicy", "AllRanks"),
            template=template,
            topology_key=(spec.get("placement") or {}).get("topologyKey") or None,
        ),
    )


def _rendezvous(rdzv: Mapping[str, Any]) -> Rendezvous:
    return Rendezvous(
        mode=rdzv.get("mode", "static"),
        port=int(rdzv.get("port", 29500)),
        timeout_seconds=int(rdzv.get("timeoutSeconds", 900)),
        min_replicas=rdzv.get("minReplicas"),
        max_replicas=rdzv.get("maxReplicas"),
        max_restarts=int(rdzv.get("maxRestarts", 3)),
        dns_records=str(rdzv.get("dnsRecords", "rank0")),
    )


def _rank_table(rt: Mapping[str, Any]) -> RankTableSpec:
    return RankTableSpec(
        format=rt.get("format", "auto"),
        hccl_version=str(rt.get("hcclVersion", "auto")),
        super_pod_size=rt.get("superPodSize"),
        mount_path=rt.get("mountPath", c.RANKTABLE_MOUNT_PATH),
        mindx_compatible=bool(rt.get("mindxCompatible", False)),
    )


STALL_POLICIES = ("Restart", "Fail", "None")


def _run_policy(rp: Mapping[str, Any]) -> RunPolicy:
    stall_policy = rp.get("stallPolicy", "Restart")
    if stall_policy not in STALL_POLICIES:
        raise SpecError("spec.runPolicy.stallPolicy",
                        f"must be one of {', '.join(STALL_POLICIES)}, got {stall_policy!r}")
    return RunPolicy(
        restart_policy=rp.get("restartPolicy", "OnFailure"),
        backoff_limit=int(rp.get("backoffLimit", 3)),
        active_deadline_seconds=rp.get("activeDeadlineSeconds"),
        ttl_seconds_after_finished=rp.get("ttlSecondsAfterFinished"),
        clean_pod_policy=rp.get("cleanPodPolicy", "Running"),
        suspend=bool(rp.get("suspend", False)),
        gang_scheduling=rp.get("gangScheduling", "Auto"),
        restart_strategy=rp.get("restartStrategy", "Auto"),
        stall_timeout_seconds=_optional_int(rp.get("stallTimeoutSeconds")),
        startup_timeout_seconds=_optional_int(rp.get("startupTimeoutSeconds")),
        stall_policy=stall_policy,
        straggler_factor=None if rp.get("stragglerFactor") is None else float(rp["stragglerFactor"]),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
