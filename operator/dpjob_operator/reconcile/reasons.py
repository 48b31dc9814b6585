"""Every phase, condition type and reason the planner writes: one home, named constants.

Users match on these (``kubectl wait --for=condition=...``, alerts on ``reason``), so they are
API: a rename is a breaking change, and a typo in one policy file must not invent a new reason.
"""

from __future__ import annotations

# Phases
PENDING = "Pending"
CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUSPENDED = "Suspended"
QUEUED = "Queued"       # Kueue has not admitted the job (yet, or again after an eviction): no rank pod
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL = (SUCCEEDED, FAILED)

# Condition types (besides the phases Created, Running, Restarting, Suspended, Succeeded, Failed)
POOL_AVAILABLE = "PoolAvailable"
PODS_SCHEDULED = "PodsScheduled"
RANK_TABLE_READY = "RankTableReady"
STALLED = "Stalled"   # also the reason of a stall (no step for runPolicy.stallTimeoutSeconds)
WAITING = "Waiting"   # why the job is not running (reconcile/waiting.py)
STUCK_TERMINATING = "StuckTerminating"  # a rank pod past its deletion deadline (reconcile/stuck.py)
NODE_LOST = "NodeLost"  # a node under the current gang is lost: the gang restarts elsewhere (reconcile/node_loss.py)
ADMITTED = "Admitted"  # Kueue admitted the job's Workload (reconcile/kueue_gate.py); also its reason when True

# Reasons
ACCEPTED = "Accepted"
POOL_NOT_CONFIGURED = "PoolNotConfigured"
POOL_CONFIGURED = "PoolConfigured"
RESUMED = "Resumed"
CREATING = "Creating"
PODS_CREATED = "PodsCreated"
ALL_RANKS_RUNNING = "AllRanksRunning"
RECOVERED = "Recovered"
JOB_SUCCEEDED = "JobSucceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
RESIZED = "Resized"
POD_DELETED = "PodDeleted"
PREEMPTED = "Preempted"
RANK_FAILED = "RankFailed"
PERMANENT_ERROR = "PermanentError"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
GANG_RESTART = "GangRestart"
GANG_UNSCHEDULABLE = "GangUnschedulable"
UNSCHEDULABLE = "Unschedulable"
SCHEDULED = "Scheduled"
STALE_GENERATION = "StaleGeneration"
SCALED_DOWN = "ScaledDown"
INVALID_SPEC = "InvalidSpec"
FAILED_CREATE_POD = "FailedCreatePod"
POD_NAME_CONFLICT = "PodNameConflict"
SERVICE_NAME_CONFLICT = "ServiceNameConflict"      # a Service of the job's name that is not ours
CONFIGMAP_NAME_CONFLICT = "ConfigMapNameConflict"  # a rank-table ConfigMap name taken by someone else
NETWORK_POLICY_NAME_CONFLICT = "NetworkPolicyNameConflict"  # a NetworkPolicy of the job's name, not ours
GANG_NAME_CONFLICT = "GangNameConflict"  # a Workload or PodGroup of the job's gang name, not ours
IMAGE_PULL_ERROR = "ImagePullError"              # Waiting: a rank's image cannot be pulled
CONTAINER_CONFIG_ERROR = "ContainerConfigError"  # Waiting: a rank's container cannot be created
NODE_NOT_READY = "NodeNotReady"                  # StuckTerminating: on a node that is down: forced
POD_STUCK_TERMINATING = "PodStuckTerminating"    # StuckTerminating: the node is Ready or unknown: reported
CLEARED = "Cleared"                              # StuckTerminating=False
NODES_HEALTHY = "NodesHealthy"                   # NodeLost=False: a gang runs again
STRAGGLER = "Straggler"                          # status.progress.slowestRank appeared or changed
STARTING = "Starting"                            # Waiting: ranks are being created or started
RANK_TABLE_WRITE_FAILED = "RankTableWriteFailed"  # the API server refused to store a completed table
ENVIRONMENT_WRITE_FAILED = "EnvironmentWriteFailed"  # ... or the ranks' shared environment (Created=False)
SPEC_FIXED = "SpecFixed"
STARTUP_TIMEOUT = "StartupTimeout"   # no first step within runPolicy.startupTimeoutSeconds
PROGRESSING = "Progressing"          # Stalled=False: steps are reported again
IN_PLACE_UNAVAILABLE = "InPlaceUnavailable"      # restartStrategy InPlace asked for, Recreate runs (why in the event)
NOT_RESTARTED_IN_PLACE = "NotRestartedInPlace"   # a rank did not follow its gang's in-place restart: recreated
# Kueue (reconcile/kueue_gate.py): the phase Queued's reasons, the Admitted condition's own, and the Events.
# While not admitted, Admitted=False carries Kueue's reason (Pending, Inadmissible, AdmissionChecksPending,
# or the eviction's: Preempted, PodsReadyTimeout, ...) and its message.
EVICTED = "Evicted"                        # phase Queued after an eviction; the Warning event
WORKLOAD_CHANGED = "WorkloadChanged"       # the job changed what its Workload asks: a new Workload, queued anew
WORKLOAD_DELETED = "WorkloadDeleted"       # someone deleted the Workload: the gang stops, a new one is queued
FAILED_TO_START = "FailedToStart"          # Kueue's admission cannot be applied to the rank pods: Failed
WORKLOAD_FINISHED = "WorkloadFinished"     # the Workload was marked Finished while the job ran: Failed
RESOURCE_FLAVOR_NOT_FOUND = "ResourceFlavorNotFound"  # an admitted ResourceFlavor cannot be read
PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"    # the job's (Workload)PriorityClass does not exist
KUEUE_WORKLOAD_NAME_CONFLICT = "KueueWorkloadNameConflict"  # a Workload of the job's name, not ours
