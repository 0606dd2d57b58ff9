{{/* Labels every object of the release carries. */}}
{{- define "aviflow.labels" -}}
app.kubernetes.io/name: aviflow
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* "repository:tag" of an images.* entry. */}}
{{- define "aviflow.image" -}}
{{ printf "%s:%s" .repository .tag }}
{{- end }}

{{/* A cluster-scoped name unique to this release: <release>-<name>. */}}
{{- define "aviflow.clusterName" -}}
{{ printf "%s-%s" .root.Release.Name .name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
What values.schema.json cannot say: checks across keys, as a failed render that names them.
Mirrors HubConfig's own validators (hub/aviflow_hub/config.py), which the hub runs again.
*/}}
{{- define "aviflow.validate" -}}
{{- $known := dict -}}
{{- range $g, $_ := .Values.hub.groups }}{{ $_ := set $known $g true }}{{ end -}}
{{- $names := dict -}}
{{- $queues := dict -}}
{{- range .Values.teams -}}
{{- if hasKey $names .name }}{{ fail (printf "teams: duplicate team name %s" .name) }}{{ end -}}
{{- if hasKey $queues .queue }}{{ fail (printf "teams: duplicate team queue %s" .queue) }}{{ end -}}
{{- $_ := set $names .name true }}{{ $_ := set $queues .queue true -}}
{{- range .groups }}{{ $_ := set $known . true }}{{ end -}}
{{- range (.adminGroups | default list) }}{{ $_ := set $known . true }}{{ end -}}
{{- if and (not .cohort) (or (ne (toString .borrowingLimit) "<nil>") (ne (toString .lendingLimit) "<nil>")) -}}
{{ fail (printf "teams[%s]: borrowingLimit and lendingLimit need a cohort" .name) }}
{{- end -}}
{{- end -}}
{{- range .Values.profiles -}}
{{- $slug := .slug -}}
{{- range (.groups | default list) -}}
{{- if not (hasKey $known .) -}}
{{ fail (printf "profiles[%s]: group %s is in no team and no hub.groups entry" $slug .) }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}
