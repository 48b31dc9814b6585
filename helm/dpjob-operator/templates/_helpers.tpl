{{/* Chart name, truncated to the DNS label limit. */}}
{{- define "dpjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, unless it already contains the chart name. */}}
{{- define "dpjob-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dpjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "dpjob-operator.labels" -}}
helm.sh/chart: {{ include "dpjob-operator.chart" . }}
{{ include "dpjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dpjob
{{- end }}

{{/* Immutable Deployment selector: name + instance only. */}}
{{- define "dpjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dpjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dpjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dpjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dpjob-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The operator's RBAC rules (least privilege: exactly the verbs operator/dpjob_operator/k8s/client.py
and kopf use). Shared by the ClusterRole and the per-namespace Roles.
*/}}
{{- define "dpjob-operator.rules" -}}
# Rank pods: created, deleted (gang restart, cleanup), and listed/watched by label selector; get
# after a 409 on create, to tell our own pod from one we must never adopt (claims by owner UID).
- apiGroups: [""]
  resources: [pods]
  verbs: [create, delete, get, list, watch]
# The headless Service of each job: created once (owner references do the cleanup); get after a
# 409, to tell our own from one we must never adopt or change (claims by owner UID).
- apiGroups: [""]
  resources: [services]
  verbs: [create, get]
# Rank-table ConfigMaps: created, read back, and patched after every gang restart.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, get, patch]
# core/v1 Events on jobs: the operator creates them; kopf posts (and may patch) its own.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
# The job's own namespace, read (never written) only when a running gang loses a rank: a namespace
# being deleted takes its jobs along, so their gangs are not restarted (k8s/namespaces.py). A
# namespaced install's RoleBinding grants it for that namespace alone.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
# The jobs: kopf lists and watches them; the operator deletes finished jobs after their TTL.
- apiGroups: [dpjob.io]
  resources: [dataparalleljobs]
  verbs: [get, list, watch, delete]
- apiGroups: [dpjob.io]
  resources: [dataparalleljobs/status]
  verbs: [patch]
# Child objects carry ownerReferences with blockOwnerDeletion=true; with the
# OwnerReferencesPermissionEnforcement admission plugin that needs update on the owner's finalizers.
- apiGroups: [dpjob.io]
  resources: [dataparalleljobs/finalizers]
  verbs: [update]
{{- if .Values.networkPolicy.enabled }}
# The NetworkPolicy of each job (spec.isolation: Job): created once (owner references do the
# cleanup); get after a 409 (claims by owner UID); deleted when a job opts out.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, get, delete]
{{- end }}
{{- if ne .Values.gangScheduling "disabled" }}
# Gang scheduling (Kubernetes' Workload API): a Workload per job and a PodGroup per gang; the
# operator watches the scheduler's verdicts on its PodGroups and deletes old generations' groups.
- apiGroups: [scheduling.k8s.io]
  resources: [workloads]
  verbs: [create, get, list, delete]
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups]
  verbs: [create, get, list, watch, delete]
{{- end }}
{{- if ne .Values.kueue.integration "disabled" }}
# Kueue's job framework for DataParallelJob: the operator creates each queued job's Workload, watches
# it for Kueue's verdicts, writes its status (Finished, PodsReady, the requeue after an eviction) and
# drops its finalizer once the job's pods are gone; replaced when the job changes what it asks.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [create, get, list, watch, update, patch, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [get, update, patch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/finalizers]
  verbs: [update]
{{- end }}
{{- end }}

{{/* The cluster-scoped reads of the Kueue integration: an admission's ResourceFlavors and the classes
that give a Workload its priority. In the cluster-wide ClusterRole, or a ClusterRole of their own for
a namespaced install (a Role cannot grant them). */}}
{{- define "dpjob-operator.kueueClusterRules" -}}
# Kueue's cluster-scoped objects, read only: an admission's ResourceFlavors (node labels, tolerations)
# and the classes that give a new Workload its priority.
- apiGroups: [kueue.x-k8s.io]
  resources: [resourceflavors, workloadpriorityclasses]
  verbs: [get, list, watch]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [get, list, watch]
{{- end }}

{{/* Who may reach a rank pod's metrics ports: the operator's own pods (status.progress reads rank 0)
and networkPolicy.metricsFrom (Prometheus). NetworkPolicy peers, as a YAML list. */}}
{{- define "dpjob-operator.metricsFrom" -}}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ .Release.Namespace }}
  podSelector:
    matchLabels:
{{- include "dpjob-operator.selectorLabels" . | nindent 6 }}
{{- with .Values.networkPolicy.metricsFrom }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The leader-election Lease: one per release, in the release namespace. */}}
{{- define "dpjob-operator.leaseName" -}}
{{- printf "%s-leader" (include "dpjob-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The operator config file (operator/dpjob_operator/config.py), rendered as JSON. */}}
{{- define "dpjob-operator.config" -}}
{{- $pools := dict }}
{{- range $name, $pool := .Values.pools }}
{{- $p := dict "nodeSelector" (default dict $pool.nodeSelector) "tolerations" (default list $pool.tolerations) "defaultBackend" $pool.defaultBackend "env" (default dict $pool.env) }}
{{- /* no device resource (CPU): leave the key out, the operator reads a missing key as None */}}
{{- with get $pool "deviceResource" }}
{{- $_ := set $p "deviceResource" . }}
{{- end }}
{{- $_ := set $pools $name $p }}
{{- end }}
{{- $cfg := dict
  "pools" $pools
  "apiQPS" .Values.apiQPS
  "apiBurst" .Values.apiBurst
  "createConcurrency" .Values.createConcurrency
  "workers" .Values.workers
  "resyncSeconds" .Values.resyncSeconds
  "podBatchSeconds" .Values.podBatchSeconds
  "namespaces" .Values.watchNamespaces
  "controllerName" .Values.controllerName
  "metricsPort" .Values.metrics.port
  "healthPort" .Values.health.port
  "metricsAuth" .Values.metrics.auth
  "metricsCertFile" (ternary "/etc/dpjob/metrics-tls/tls.crt" "" (ne .Values.metrics.tls.secretName ""))
  "metricsKeyFile" (ternary "/etc/dpjob/metrics-tls/tls.key" "" (ne .Values.metrics.tls.secretName ""))
  "clusterDomain" .Values.clusterDomain
  "logLevel" .Values.logLevel
  "gangScheduling" .Values.gangScheduling
  "restartInPlace" .Values.restartInPlace
  "stuckTerminatingSeconds" .Values.stuckTerminatingSeconds
  "networkPolicy" (ternary "enabled" "disabled" .Values.networkPolicy.enabled)
  "kueue" .Values.kueue.integration
  "kueueShortWorkloadNames" .Values.kueue.shortWorkloadNames
  "networkPolicyMetricsFrom" (include "dpjob-operator.metricsFrom" . | fromYamlArray)
  "leaderElection" (dict "enabled" .Values.leaderElection.enabled "leaseName" (include "dpjob-operator.leaseName" .)) }}
{{- toPrettyJson $cfg }}
{{- end }}

{{- define "dpjob-operator.metricsReader" -}}
{{- include "dpjob-operator.fullname" . }}-metrics-reader
{{- end }}
