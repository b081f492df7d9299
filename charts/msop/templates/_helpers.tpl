{{/* The app.kubernetes.io/name label: the chart's name. */}}
{{- define "msop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else the release name when it
contains the chart's name, else <release>-<chart>.
*/}}
{{- define "msop.fullname" -}}
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

{{/* The operator's ServiceAccount, Deployment, PodDisruptionBudget and metrics Service. */}}
{{- define "msop.manager" -}}
{{- printf "%s-controller-manager" (include "msop.fullname" .) }}
{{- end }}

{{/* The recommended labels every object carries; the caller adds the component. */}}
{{- define "msop.labels" -}}
app.kubernetes.io/name: {{ include "msop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: msop
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of the operator's own objects. */}}
{{- define "msop.managerLabels" -}}
{{ include "msop.labels" . }}
app.kubernetes.io/component: controller-manager
{{- end }}

{{/* What selects the operator's pods (immutable in a Deployment: no version here). */}}
{{- define "msop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "msop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller-manager
{{- end }}

{{/* The ServiceAccount as a subject of the bindings. */}}
{{- define "msop.subject" -}}
- kind: ServiceAccount
  name: {{ include "msop.manager" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/* The operator image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "msop.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/* The Lease's namespace. */}}
{{- define "msop.leaseNamespace" -}}
{{- .Values.leaderElection.namespace | default .Release.Namespace }}
{{- end }}
