{{/* Common labels of every object the chart renders (except the RBAC files, verbatim copies of deploy/ccm). */}}
{{- define "portside.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: portside
{{- end }}

{{- define "portside.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Checks values that the schema cannot express across keys. The RBAC of
deploy/ccm (ServiceAccount kube-system/cloud-controller-manager) fixes the
namespace.
*/}}
{{- define "portside.validate" -}}
{{- if ne .Release.Namespace "kube-system" }}
{{- fail (printf "the chart installs into kube-system (its RBAC is deploy/ccm's), not %q: use -n kube-system" .Release.Namespace) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount %d needs leaderElection.enabled" (int .Values.replicaCount)) }}
{{- end }}
{{- if and .Values.leaderMigration.enabled (not .Values.leaderElection.enabled) }}
{{- fail "leaderMigration.enabled needs leaderElection.enabled" }}
{{- end }}
{{- if and .Values.webhook.enabled (not .Values.webhook.caBundle) (not .Values.webhook.certManager.enabled) }}
{{- fail "webhook.enabled needs webhook.caBundle or webhook.certManager.enabled: the apiserver must trust the webhook's certificate" }}
{{- end }}
{{- if and .Values.webhook.caBundle .Values.webhook.certManager.enabled }}
{{- fail "set webhook.caBundle or webhook.certManager.enabled, not both" }}
{{- end }}
{{- with .Values.webhook.clientCA }}
{{- if and .configMapName .secretName }}
{{- fail "set webhook.clientCA.configMapName or webhook.clientCA.secretName, not both" }}
{{- end }}
{{- if and (or .configMapName .secretName) (not $.Values.webhook.enabled) }}
{{- fail "webhook.clientCA needs webhook.enabled" }}
{{- end }}
{{- end }}
{{- end }}
