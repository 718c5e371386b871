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
The internal key: the value given, the one already stored in the release's
Secret (so upgrades keep it, and replicas of two releases agree), or a new
random one.
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
{{- randAlphaNum 48 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The bootstrap admin key: the value given, the one already stored in the
release's Secret (so upgrades keep it), or a new random one.
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
{{- printf "sylk_%s" (randAlphaNum 40) }}
{{- end }}
{{- end }}
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
