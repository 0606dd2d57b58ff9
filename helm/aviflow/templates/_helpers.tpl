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
{{ printf "%s:%s" .repository .tag }}{{ with .digest }}@{{ . }}{{ end }}
{{- end }}

{{/*
Who may log in, and how the users' address is served: the dev login has no default password
and stays off public addresses unless the admin says otherwise; genericOAuth names who may
log in; https names its certificate.
*/}}
{{- define "aviflow.validateAccess" -}}
{{- $public := or (ne .Values.proxy.type "ClusterIP") .Values.ingress.enabled -}}
{{- if eq .Values.auth.type "dev" -}}
{{- $dev := .Values.auth.dev | default dict -}}
{{- if not $dev.userPassword -}}
{{ fail "auth.dev.userPassword: the dev login has no default password; set one (8 characters or more), or use auth.type generic-oauth with auth.genericOAuth" }}
{{- end -}}
{{- if and $public (not $dev.allowOnPublicAddress) -}}
{{ fail (printf "auth.type dev on a public address (proxy.type %s%s): anyone who knows its one password may log in as any user. Use auth.type generic-oauth, or proxy.type ClusterIP (kubectl port-forward), or set auth.dev.allowOnPublicAddress: true for a trial" .Values.proxy.type (ternary ", ingress.enabled" "" .Values.ingress.enabled)) }}
{{- end -}}
{{- else -}}
{{- $oauth := .Values.auth.genericOAuth | default dict -}}
{{- if not (or $oauth.allowedUsers $oauth.allowedGroups $oauth.adminGroups) -}}
{{ fail "auth.genericOAuth: name who may log in with allowedGroups or allowedUsers (every account of the identity provider is not allowed)" }}
{{- end -}}
{{- end -}}
{{- if and .Values.proxy.https.enabled (not .Values.proxy.https.secret) -}}
{{ fail "proxy.https.enabled needs proxy.https.secret: a kubernetes.io/tls Secret (tls.crt, tls.key) in the release's namespace" }}
{{- end -}}
{{- end }}

{{/*
Namespaces by trust: each user namespace (notebooks, every team's) is a name of its own, apart
from the release's; the teams' jobs reach the run store through a volume or the admin's claims.
*/}}
{{- define "aviflow.validateNamespaces" -}}
{{- $seen := dict .Release.Namespace "the release" -}}
{{- $notebooks := include "aviflow.notebooksNamespace" . -}}
{{- if hasKey $seen $notebooks }}{{ fail (printf "namespaces.notebooks: %s is the release's namespace; users' notebooks run apart from the control plane" $notebooks) }}{{ end -}}
{{- $_ := set $seen $notebooks "the notebooks" -}}
{{- range .Values.teams -}}
{{- $ns := include "aviflow.teamNamespace" (dict "root" $ "team" .) -}}
{{- if gt (len $ns) 63 }}{{ fail (printf "teams[%s]: namespace %s is longer than 63 characters; set teams[].namespace" .name $ns) }}{{ end -}}
{{- if hasKey $seen $ns }}{{ fail (printf "teams[%s]: namespace %s is already %s's namespace; each team's jobs run in a namespace of their own" .name $ns (get $seen $ns)) }}{{ end -}}
{{- $_ := set $seen $ns (printf "team %s" .name) -}}
{{- end -}}
{{- if and .Values.teams (not (or .Values.runStore.volume .Values.runStore.existingClaim)) -}}
{{ fail "runStore: the teams' jobs run in their own namespaces and a claim cannot cross namespaces; set runStore.volume (a PersistentVolume source: an NFS export, a CSI volume) or runStore.existingClaim (a claim of that name in the release's namespace and every team's)" }}
{{- end -}}
{{- end }}

{{/*
Training runtimes against the teams' Pod Security level (aviflow.k8s.runtimes, which the hub
and the controller check again): hostNetwork and every capability but NET_BIND_SERVICE need
privileged; a level below restricted is for the controller's pods alone, so not with plain
Jobs from kubectl users (kubectlAccess.jobs), whom Pod Security would then no longer hold.
*/}}
{{- define "aviflow.validateRuntimes" -}}
{{- $k := .Values.api.kubernetes | default dict -}}
{{- $level := $k.podSecurity | default "restricted" -}}
{{- range $name, $rt := ($k.runtimes | default dict) -}}
{{- $caps := without ($rt.capabilities | default list) "NET_BIND_SERVICE" -}}
{{- if and (ne $level "privileged") (or $rt.hostNetwork $caps) -}}
{{ fail (printf "api.kubernetes.runtimes.%s: hostNetwork and capabilities other than NET_BIND_SERVICE need Pod Security privileged, and the teams' namespaces enforce %s (api.kubernetes.podSecurity): their pods would never be created. Set api.kubernetes.podSecurity: privileged, or drop them from the runtime" $name $level) }}
{{- end -}}
{{- end -}}
{{- if and (ne $level "restricted") .Values.kubectlAccess.enabled .Values.kubectlAccess.jobs -}}
{{ fail (printf "api.kubernetes.podSecurity %s with kubectlAccess.jobs: team members' own Jobs would run with what Pod Security %s allows (root, any capability); keep podSecurity restricted, or turn kubectlAccess.jobs off" $level $level) }}
{{- end -}}
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
{{- include "aviflow.validateAccess" . -}}
{{- include "aviflow.validateNamespaces" . -}}
{{- include "aviflow.validateRuntimes" . -}}
{{- range .Values.profiles -}}
{{- $slug := .slug -}}
{{- range (.groups | default list) -}}
{{- if not (hasKey $known .) -}}
{{ fail (printf "profiles[%s]: group %s is in no team and no hub.groups entry" $slug .) }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The run store's claim (in every namespace that mounts it): the chart's, or runStore.existingClaim. */}}
{{- define "aviflow.runsClaim" -}}
{{ .Values.runStore.existingClaim | default (printf "%s-runs" .Release.Name) }}
{{- end }}

{{/* The notebooks' namespace: namespaces.notebooks, or <release>-notebooks. */}}
{{- define "aviflow.notebooksNamespace" -}}
{{ .Values.namespaces.notebooks | default (printf "%s-notebooks" .Release.Name) }}
{{- end }}

{{/* A team's namespace (dict "root" $ "team" .): teams[].namespace, or <release>-<name>. */}}
{{- define "aviflow.teamNamespace" -}}
{{ .team.namespace | default (printf "%s-%s" .root.Release.Name .team.name) }}
{{- end }}

{{/* queue -> its team's namespace (JSON): api.kubernetes.queueNamespaces. */}}
{{- define "aviflow.queueNamespaces" -}}
{{- $out := dict -}}
{{- range .Values.teams }}{{ $_ := set $out .queue (include "aviflow.teamNamespace" (dict "root" $ "team" .)) }}{{ end -}}
{{- toJson $out -}}
{{- end }}

{{/* The namespaces jobs run in (JSON list): the teams', or without teams the release's. */}}
{{- define "aviflow.jobNamespaces" -}}
{{- $out := list -}}
{{- range .Values.teams }}{{ $out = append $out (include "aviflow.teamNamespace" (dict "root" $ "team" .)) }}{{ end -}}
{{- if not $out }}{{ $out = list .Release.Namespace }}{{ end -}}
{{- toJson $out -}}
{{- end }}

{{/* The run store's claims: a namespace mounts it where aviflow-api, the controller or jobs run (JSON list). */}}
{{- define "aviflow.runsNamespaces" -}}
{{- $jobs := include "aviflow.jobNamespaces" . | fromJsonArray -}}
{{- toJson (prepend $jobs .Release.Namespace | uniq) -}}
{{- end }}

{{/*
The cluster settings (aviflow.k8s.settings.ClusterSettings, JSON): api.kubernetes plus what
the chart owns (namespace, the run store, networkPolicy). aviflow-api and the controller read
the same.
*/}}
{{- define "aviflow.clusterSettings" -}}
{{- $settings := deepCopy (.Values.api.kubernetes | default dict) -}}
{{- $_ := set $settings "namespace" .Release.Namespace -}}
{{- $_ := set $settings "queueNamespaces" (include "aviflow.queueNamespaces" . | fromJson) -}}
{{- $_ := set $settings "runs" (dict "claimName" (include "aviflow.runsClaim" .) "mountPath" "/aviflow/runs" "localPath" "/aviflow/runs") -}}
{{- if not (hasKey $settings "gpuResource") }}{{ $_ := set $settings "gpuResource" .Values.kueue.gpuResource }}{{ end -}}
{{- $_ := set $settings "networkPolicy" .Values.networkPolicy -}}
{{- /* no trainer images listed: jobs run in the chart's own trainer image (the controller's) */ -}}
{{- if and (not $settings.images) (not $settings.image) -}}
{{- $_ := set $settings "image" (include "aviflow.image" .Values.images.controller) -}}
{{- end -}}
{{- toJson $settings -}}
{{- end }}

{{/* Where the hub's API and aviflow-api listen, by Service name (notebooks, in their own namespace, and the proxy use them). */}}
{{- define "aviflow.hubUrl" -}}
{{ printf "http://%s-hub.%s.svc:8081" .Release.Name .Release.Namespace }}
{{- end }}
{{- define "aviflow.apiUrl" -}}
{{ printf "http://%s-api.%s.svc:8088" .Release.Name .Release.Namespace }}
{{- end }}

{{/*
The hub config (hub/aviflow_hub/config.py, YAML): the values' hub sections plus the keys the
chart owns (aviflow_hub.chart.CHART_OWNED). The hub and aviflow-api load it with the same
strict loader; a key it does not know stops them with its name.
*/}}
{{- define "aviflow.hubConfig" -}}
{{- $hub := deepCopy .Values.hub -}}
{{- $_ := set $hub "bind" "0.0.0.0" -}}
{{- $_ := set $hub "port" 8000 -}}
{{- $_ := set $hub "hubPort" 8081 -}}
{{- $_ := set $hub "hubConnectUrl" (include "aviflow.hubUrl" .) -}}
{{- $_ := set $hub "proxyUrl" (printf "http://%s-proxy-api.%s.svc:8001" .Release.Name .Release.Namespace) -}}
{{- $_ := set $hub "dataDir" "/srv/jupyterhub" -}}
{{- $_ := set $hub "spawner" "kubernetes" -}}
{{- $_ := set $hub "namespace" (include "aviflow.notebooksNamespace" .) -}}
{{- $_ := set $hub "notebookBind" "podIP" -}}
{{- $api := deepCopy .Values.api -}}
{{- $_ := set $api "bind" "0.0.0.0" -}}
{{- $_ := set $api "port" 8088 -}}
{{- $_ := set $api "url" (include "aviflow.apiUrl" .) -}}
{{- $_ := set $api "backend" "kubernetes" -}}
{{- $_ := set $api "runRoot" "/aviflow/runs" -}}
{{- $_ := set $api "external" true -}}
{{- $_ := set $api "kubernetes" (include "aviflow.clusterSettings" . | fromJson) -}}
{{- $cfg := dict "hub" $hub "auth" .Values.auth "teams" .Values.teams "profiles" .Values.profiles "storage" .Values.storage "culler" .Values.culler "api" $api -}}
{{- toYaml $cfg -}}
{{- end }}

{{/* The pod security context of the hub's, aviflow-api's and the controller's pods. */}}
{{- define "aviflow.podSecurity" -}}
runAsUser: 1000
runAsGroup: 1000
fsGroup: 1000
fsGroupChangePolicy: OnRootMismatch  # no recursive chown of a volume at every start
runAsNonRoot: true
seccompProfile: {type: RuntimeDefault}
{{- end }}
{{- define "aviflow.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}
