{{/*
Chart name, truncated to the 63 characters a label value allows.
*/}}
{{- define "sylk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified release name, the prefix of every object name.
*/}}
{{- define "sylk.fullname" -}}
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

{{/*
The services, in start order, as a space-separated list (use splitList).
*/}}
{{- define "sylk.services" -}}
librarian archivalist academic orchestrator worker architect guide gateway
{{- end }}

{{/*
The services other services reach by gRPC address (SYLK_PEER_<NAME>).
*/}}
{{- define "sylk.peers" -}}
guide architect orchestrator librarian archivalist academic
{{- end }}

{{/*
Object name of one service: dict "root" $ "name" "guide".
*/}}
{{- define "sylk.componentName" -}}
{{- printf "%s-%s" (include "sylk.fullname" .root | trunc 50 | trimSuffix "-") .name }}
{{- end }}

{{- define "sylk.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "sylk.labels" -}}
helm.sh/chart: {{ include "sylk.chart" . }}
{{ include "sylk.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sylk
{{- end }}

{{- define "sylk.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sylk.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of one service's objects: dict "root" $ "name" "guide".
*/}}
{{- define "sylk.componentLabels" -}}
{{ include "sylk.labels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{- define "sylk.componentSelectorLabels" -}}
{{ include "sylk.selectorLabels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{- define "sylk.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sylk.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image of a binary: dict "root" $ "binary" "sylk-guide".
*/}}
{{- define "sylk.image" -}}
{{- printf "%s/%s:%s" (.root.Values.image.repository | trimSuffix "/") .binary (.root.Values.image.tag | default .root.Chart.AppVersion) }}
{{- end }}

{{/*
Name of the Secret the chart creates for the settings given as values.
*/}}
{{- define "sylk.secretName" -}}
{{- include "sylk.fullname" . }}
{{- end }}

{{/*
Whether the chart creates its Secret: some credential has no existingSecret.
*/}}
{{- define "sylk.createSecret" -}}
{{- if or (not .Values.postgres.existingSecret) (not .Values.redis.existingSecret) (not .Values.nats.existingSecret) (not .Values.auth.existingSecret) (not .Values.internal.existingSecret) }}true{{ end }}
{{- end }}

{{/*
secretKeyRef body for a credential: dict "root" $ "cfg" .Values.postgres "key" "postgres-dsn".
The key is that of the existing Secret when one is named, else the chart's.
*/}}
{{- define "sylk.secretKeyRef" -}}
name: {{ .cfg.existingSecret | default (include "sylk.secretName" .root) }}
key: {{ if .cfg.existingSecret }}{{ .cfg.existingSecretKey | default .key }}{{ else }}{{ .key }}{{ end }}
{{- end }}

{{/*
The environment every service reads from Secrets.
*/}}
{{- define "sylk.secretEnv" -}}
- name: SYLK_POSTGRES_DSN
  valueFrom:
    secretKeyRef:
      {{- include "sylk.secretKeyRef" (dict "root" . "cfg" .Values.postgres "key" "postgres-dsn") | nindent 6 }}
- name: SYLK_REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- include "sylk.secretKeyRef" (dict "root" . "cfg" .Values.redis "key" "redis-url") | nindent 6 }}
- name: SYLK_NATS_URL
  valueFrom:
    secretKeyRef:
      {{- include "sylk.secretKeyRef" (dict "root" . "cfg" .Values.nats "key" "nats-url") | nindent 6 }}
- name: SYLK_INTERNAL_KEY
  valueFrom:
    secretKeyRef:
      {{- include "sylk.secretKeyRef" (dict "root" . "cfg" .Values.internal "key" "internal-key") | nindent 6 }}
{{- end }}

{{/*
The internal key: the value given, or the one already in the release's
Secret (an upgrade of a release installed by an earlier chart version, which
generated it). Nothing is generated: a random key would change on every
render where lookup cannot run (helm template, GitOps tools), and with it the
Secret, every pod's checksum and the key the running pods sign with.
*/}}
{{- define "sylk.internalKey" -}}
{{- if .Values.internal.key }}
{{- if lt (len .Values.internal.key) 32 }}
{{- fail "internal.key must have at least 32 characters" }}
{{- end }}
{{- .Values.internal.key }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "sylk.secretName" .) }}
{{- if and $existing $existing.data (hasKey $existing.data "internal-key") }}
{{- index $existing.data "internal-key" | b64dec }}
{{- else }}
{{- fail "set internal.key (at least 32 characters, e.g. --set internal.key=$(openssl rand -hex 32)) or internal.existingSecret: the chart does not generate it, so that every render gives the same key" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The bootstrap admin key: the value given, or the one already in the
release's Secret (kept from an earlier chart version that generated it).
Nothing is generated, for the reason given for the internal key.
*/}}
{{- define "sylk.bootstrapKey" -}}
{{- if .Values.auth.bootstrapKey }}
{{- $key := .Values.auth.bootstrapKey }}
{{- if or (not (hasPrefix "sylk_" $key)) (lt (len $key) 32) }}
{{- fail "auth.bootstrapKey must start with \"sylk_\" and have at least 32 characters" }}
{{- end }}
{{- $key }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "sylk.secretName" .) }}
{{- if and $existing $existing.data (hasKey $existing.data "bootstrap-key") }}
{{- index $existing.data "bootstrap-key" | b64dec }}
{{- else }}
{{- fail "set auth.bootstrapKey (\"sylk_\" and at least 27 more characters, e.g. --set auth.bootstrapKey=sylk_$(openssl rand -hex 24)) or auth.existingSecret: the chart does not generate it, so that every render gives the same key" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Seconds in a duration of hours, minutes and seconds ("10m", "1h30m",
"90s"), the forms values.schema.json allows for such values.
*/}}
{{- define "sylk.seconds" -}}
{{- $total := 0 }}
{{- range $part := regexFindAll "[0-9]+[hms]" . -1 }}
{{- $n := regexFind "[0-9]+" $part | atoi }}
{{- if hasSuffix "h" $part }}
{{- $total = add $total (mul $n 3600) }}
{{- else if hasSuffix "m" $part }}
{{- $total = add $total (mul $n 60) }}
{{- else }}
{{- $total = add $total $n }}
{{- end }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
terminationGracePeriodSeconds of one service: dict "root" $ "name" "worker".
The worker's is its preStop sleep, the shutdown delay, its drain timeout
(the time running tasks get to finish) and drainMarginSeconds (to hand the
rest back): the kubelet must not kill it while it drains. Any other
service's is its own value, or the shared terminationGracePeriodSeconds
plus its preStop sleep (the kubelet counts the preStop hook in the grace
period).
*/}}
{{- define "sylk.gracePeriod" -}}
{{- $svc := index .root.Values .name }}
{{- $preStop := int ($svc.preStopSleepSeconds | default 0) }}
{{- if eq .name "worker" }}
{{- add $preStop (include "sylk.seconds" .root.Values.shutdownDelay | atoi) (include "sylk.seconds" $svc.drainTimeout | atoi) $svc.drainMarginSeconds }}
{{- else if not (kindIs "invalid" $svc.terminationGracePeriodSeconds) }}
{{- int $svc.terminationGracePeriodSeconds }}
{{- else }}
{{- add .root.Values.terminationGracePeriodSeconds $preStop }}
{{- end }}
{{- end }}

{{/*
Whether a service may run more than one pod (so a PodDisruptionBudget
means something): dict "root" $ "name" "guide".
*/}}
{{- define "sylk.manyPods" -}}
{{- $svc := index .root.Values .name }}
{{- $hpa := and $svc.autoscaling $svc.autoscaling.enabled }}
{{- if or (gt (int $svc.replicas) 1) (and $hpa (gt (int $svc.autoscaling.maxReplicas) 1)) }}true{{ end }}
{{- end }}

{{/*
Whether a service gets a PodDisruptionBudget: dict "root" $ "name" "guide".
Its own podDisruptionBudget.enabled, else the shared one; and only when it
may run more than one pod: with one, a budget either blocks every node drain
(minAvailable 1) or allows everything (maxUnavailable 1).
*/}}
{{- define "sylk.pdbEnabled" -}}
{{- $own := (index .root.Values .name).podDisruptionBudget | default dict }}
{{- $on := .root.Values.podDisruptionBudget.enabled }}
{{- if not (kindIs "invalid" $own.enabled) }}
{{- $on = $own.enabled }}
{{- end }}
{{- if and $on (include "sylk.manyPods" .) }}true{{ end }}
{{- end }}

{{/*
The budget of a service's PodDisruptionBudget, as YAML: its own minAvailable
or maxUnavailable when it sets one, else the shared one.
*/}}
{{- define "sylk.pdbBudget" -}}
{{- $own := (index .root.Values .name).podDisruptionBudget | default dict }}
{{- $shared := .root.Values.podDisruptionBudget }}
{{- if and (not (kindIs "invalid" $own.minAvailable)) (not (kindIs "invalid" $own.maxUnavailable)) }}
{{- fail (printf "%s.podDisruptionBudget: set minAvailable or maxUnavailable, not both" .name) }}
{{- end }}
{{- if not (kindIs "invalid" $own.minAvailable) }}
minAvailable: {{ $own.minAvailable | toJson }}
{{- else if not (kindIs "invalid" $own.maxUnavailable) }}
maxUnavailable: {{ $own.maxUnavailable | toJson }}
{{- else if and (not (kindIs "invalid" $shared.minAvailable)) (not (kindIs "invalid" $shared.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both (null the other)" }}
{{- else if not (kindIs "invalid" $shared.minAvailable) }}
minAvailable: {{ $shared.minAvailable | toJson }}
{{- else if not (kindIs "invalid" $shared.maxUnavailable) }}
maxUnavailable: {{ $shared.maxUnavailable | toJson }}
{{- else }}
maxUnavailable: 1
{{- end }}
{{- end }}

{{/*
The services a HorizontalPodAutoscaler may scale: those whose pods hold no
work of their own, so that removing one loses nothing but its in-flight
calls. Not the orchestrator (it holds the leases of its runs), the worker
(it drains running tasks for minutes; scale it on its queue instead) nor the
librarian (a stopping replica ends the index operations it runs, and each
replica loads every index into memory at start).
*/}}
{{- define "sylk.autoscaled" -}}
guide architect archivalist academic gateway
{{- end }}

{{/*
Validation of values that would otherwise fail only at run time.
*/}}
{{- define "sylk.validate" -}}
{{- if and (not .Values.postgres.existingSecret) (not .Values.postgres.dsn) }}
{{- fail "set postgres.dsn or postgres.existingSecret" }}
{{- end }}
{{- if and (not .Values.redis.existingSecret) (not .Values.redis.url) }}
{{- fail "set redis.url or redis.existingSecret" }}
{{- end }}
{{- if and (not .Values.nats.existingSecret) (not .Values.nats.url) }}
{{- fail "set nats.url or nats.existingSecret" }}
{{- end }}
{{- if not .Values.image.repository }}
{{- fail "set image.repository" }}
{{- end }}
{{- if .Values.gateway.enabled }}
{{- range $peer := splitList " " (include "sylk.peers" .) }}
{{- if not (index $.Values $peer).enabled }}
{{- fail (printf "the gateway needs the %s service: set %s.enabled=true or gateway.enabled=false" $peer $peer) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.internalTLS.enabled (not .Values.internalTLS.existingSecret) }}
{{- fail "internalTLS.enabled needs internalTLS.existingSecret: a Secret with tls.crt, tls.key and ca.crt" }}
{{- end }}
{{- if and .Values.networkPolicy.workerEgress.enabled (not .Values.networkPolicy.enabled) }}
{{- fail "networkPolicy.workerEgress.enabled needs networkPolicy.enabled=true: without it no NetworkPolicy is rendered and task commands reach everything the worker's pods can" }}
{{- end }}
{{- /* The orchestrator, the architect and the archivalist check sessions
through the Guide at the address the ConfigMap gives: without a guide
Service every such call fails. */}}
{{- if not .Values.guide.enabled }}
{{- range $svc := list "orchestrator" "architect" "archivalist" }}
{{- if (index $.Values $svc).enabled }}
{{- fail (printf "the %s needs the guide service (it checks sessions through it): set guide.enabled=true or %s.enabled=false" $svc $svc) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.architect.enabled (not .Values.orchestrator.enabled) }}
{{- fail "the architect needs the orchestrator service: set orchestrator.enabled=true or architect.enabled=false" }}
{{- end }}
{{- range $name := splitList " " (include "sylk.services" .) }}
{{- $svc := index $.Values $name }}
{{- if $svc.enabled }}
{{- $before := add ($svc.preStopSleepSeconds | default 0) (include "sylk.seconds" $.Values.shutdownDelay | atoi) }}
{{- if le (include "sylk.gracePeriod" (dict "root" $ "name" $name) | atoi) $before }}
{{- fail (printf "%s: the termination grace period must be longer than its preStop sleep plus shutdownDelay (%d s), or its pods are killed before they drain" $name $before) }}
{{- end }}
{{- $budget := include "sylk.pdbBudget" (dict "root" $ "name" $name) | fromYaml }}
{{- $hpa := and $svc.autoscaling $svc.autoscaling.enabled }}
{{- if and (include "sylk.pdbEnabled" (dict "root" $ "name" $name)) (not $hpa) (hasKey $budget "minAvailable") (not (kindIs "string" $budget.minAvailable)) }}
{{- if ge (int $budget.minAvailable) (int $svc.replicas) }}
{{- fail (printf "%s.podDisruptionBudget.minAvailable must be less than %s.replicas, or no pod of it can ever be evicted (node drains hang)" $name $name) }}
{{- end }}
{{- end }}
{{- if and $hpa (lt (int $svc.autoscaling.maxReplicas) (int $svc.autoscaling.minReplicas)) }}
{{- fail (printf "%s.autoscaling.maxReplicas must be at least minReplicas" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.repositories.enabled }}
{{- if not (hasPrefix "/" .Values.repositories.mountPath) }}
{{- fail "repositories.mountPath must be an absolute path" }}
{{- end }}
{{- if has (trimSuffix "/" .Values.repositories.mountPath) (list "" "/tmp" "/workspaces" "/clones" "/etc/sylk") }}
{{- fail "repositories.mountPath must be a directory of its own (not /, /tmp, /workspaces, /clones or /etc/sylk)" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The claim of the repositories volume: the existing one named, or the chart's.
*/}}
{{- define "sylk.repositoriesClaim" -}}
{{- .Values.repositories.existingClaim | default (printf "%s-repositories" (include "sylk.fullname" .)) }}
{{- end }}
