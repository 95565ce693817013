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
