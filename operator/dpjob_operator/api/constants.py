"""Names shared by the CRD, the builders and the tests: labels, annotations, the API group."""

GROUP = "dpjob.io"
VERSION = "v1alpha1"
PLURAL = "dataparalleljobs"
KIND = "DataParallelJob"
API_VERSION = f"{GROUP}/{VERSION}"

LABEL_JOB = "dpjob.io/job-name"
LABEL_RANK = "dpjob.io/rank"
LABEL_RESTART = "dpjob.io/restart"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "dpjob-operator"
ANNOTATION_REPLICAS = "dpjob.io/replicas"  # replicas the gang was created for (resize detection)
ANNOTATION_WORLD_SIZE = "dpjob.io/world-size"

TRAINER_CONTAINER = "trainer"
# The trainer container's Prometheus port (named "metrics") unless the template names its own; rank 0's
# endpoint there is what the operator reads for status.progress (api/progress.py).
METRICS_PORT = 9090
METRICS_PORT_NAME = "metrics"
# Written by the Ascend device plugin on every pod allocated Ascend chips; read by the rank table.
ASCEND_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
# Rank-table file names: the ConfigMap's keys, so also the file names under the mount path.
RANKTABLE_KEY_GENERIC = "ranktable.json"
RANKTABLE_KEY_HCCL = "hccl.json"
RANKTABLE_MOUNT_PATH = "/etc/dpjob/ranktable"  # default of spec.rankTable.mountPath
MINDX_MOUNT_PATH = "/user/serverid/devindex/config"
