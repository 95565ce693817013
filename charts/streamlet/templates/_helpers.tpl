{{/* The release's full name, capped for DNS labels. */}}
{{- define "streamlet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "streamlet.operatorName" -}}
{{- printf "%s-operator" (include "streamlet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamlet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "streamlet.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image from values {repository, tag, digest}: repository@digest when the digest is set,
else repository:tag, the tag defaulting to the chart's appVersion. Called with (dict "image"
<values> "appVersion" .Chart.AppVersion). */}}
{{- define "streamlet.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .appVersion) -}}
{{- end -}}
{{- end -}}

{{- define "streamlet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: streamlet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "streamlet.operatorSelector" -}}
app.kubernetes.io/name: streamlet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The namespaces the operator watches, as JSON (an empty list: every namespace):
operator.watchNamespaces, or with rbac.scope=namespace and none named, the release's own. */}}
{{- define "streamlet.watchNamespaces" -}}
{{- if .Values.operator.watchNamespaces -}}
{{- toJson .Values.operator.watchNamespaces -}}
{{- else if eq .Values.rbac.scope "namespace" -}}
{{- list .Release.Namespace | toJson -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/* The Lease the operator's replicas elect their leader with (--lease), in the release's
namespace; the operator makes it. */}}
{{- define "streamlet.leaseName" -}}
{{- include "streamlet.operatorName" . -}}
{{- end -}}

{{/* What the operator does in a namespace it watches (a ClusterRole's rules with
rbac.scope=cluster, each watched namespace's Role's with rbac.scope=namespace). Every verb is
one the operator (streamlet_operator/kube.py's callers, and kopf for its own resources) uses. */}}
{{- define "streamlet.namespacedRules" -}}
# Its own resources: watched, annotated (kopf's progress), finalized, with status.
- apiGroups: [streamlet.dev]
  resources: [brokers, streams]
  verbs: [get, list, watch, patch, update]
- apiGroups: [streamlet.dev]
  resources: [brokers/status, streams/status]
  verbs: [get, patch, update]
# What a Broker is made of.
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, create, patch]
# Secrets: the users file it renders, the operator's own password, and the export users' (one
# per Stream export, listed by label and deleted with it); never watched.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, create, patch, delete]
# PodIP advertising: the stream directory names a pod by its IP, read from its status; the
# placement driver lists a Broker's pods for those being deleted (leadership moves first)
# and rolls them (updateStrategy OnDelete): it deletes one pod at a time, once its
# leaderships moved and no stream would lose its quorum; the StatefulSet makes it again.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, delete]
# The StatefulSet; deleted with its pods orphaned (they keep running) to make it again with
# larger volumes, and the PVCs' requests raised (growing storage).
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, create, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch]
# A Broker's NetworkPolicy; deleted when spec.networkPolicy.enabled turns false.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# Stream.spec.export: the schedule (a CronJob, or a ScheduledSparkApplication with the
# Spark operator installed) and the Jobs of its runs, listed for the last outcome.
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, create, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list]
- apiGroups: [sparkoperator.k8s.io]
  resources: [scheduledsparkapplications]
  verbs: [get, create, patch, delete]
# Events about the resources it handles.
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
