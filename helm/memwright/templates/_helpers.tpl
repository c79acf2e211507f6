{{/* Names and labels shared by every template. */}}

{{/* The services this chart runs, in pipeline order. */}}
{{- define "memwright.services" -}}
ingest sweeper curator indexer api
{{- end -}}

{{/* Services that serve the public HTTP API besides the ops port. */}}
{{- define "memwright.httpServices" -}}
ingest api
{{- end -}}

{{- define "memwright.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-memwright unless the release name already contains the chart name. */}}
{{- define "memwright.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of one service's objects: <fullname>-<service>. Call with (dict "root" $ "svc" "ingest"). */}}
{{- define "memwright.svcname" -}}
{{- printf "%s-%s" (include "memwright.fullname" .root | trunc 50 | trimSuffix "-") .svc -}}
{{- end -}}

{{- define "memwright.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "memwright.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memwright.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "memwright.labels" -}}
helm.sh/chart: {{ include "memwright.chart" . }}
{{ include "memwright.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: memwright
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of one service's objects. Call with (dict "root" $ "svc" "ingest"). */}}
{{- define "memwright.svcLabels" -}}
{{ include "memwright.labels" .root }}
app.kubernetes.io/component: {{ .svc }}
{{- end -}}

{{- define "memwright.svcSelectorLabels" -}}
{{ include "memwright.selectorLabels" .root }}
app.kubernetes.io/component: {{ .svc }}
{{- end -}}

{{- define "memwright.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "memwright.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "memwright.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
PostgreSQL DSN without a password (the password reaches asyncpg as PGPASSWORD from
the Secret), so the DSN can live in the ConfigMap.
*/}}
{{- define "memwright.pgDsn" -}}
{{- with .Values.postgres -}}
{{- printf "postgresql://%s@%s:%d/%s?sslmode=%s" .user .host (int .port) .database .sslmode -}}
{{- end -}}
{{- end -}}

{{/* One env entry read from the existing Secret. Call with (dict "root" $ "var" "NAME" "key" "k" "optional" bool). */}}
{{- define "memwright.secretEnv" -}}
- name: {{ .var }}
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.secrets.existingSecret }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end -}}

{{/* The PostgreSQL credentials: a password (PGPASSWORD) or, with dsnFromSecret, the whole DSN. */}}
{{- define "memwright.pgSecretEnv" -}}
{{- if .Values.postgres.dsnFromSecret -}}
{{ include "memwright.secretEnv" (dict "root" . "var" "MEMWRIGHT_PG_DSN" "key" .Values.secrets.keys.pgDsn) }}
{{- else -}}
{{ include "memwright.secretEnv" (dict "root" . "var" "PGPASSWORD" "key" .Values.secrets.keys.pgPassword) }}
{{- end -}}
{{- end -}}

{{/*
The secrets each service reads, and no others. Call with (dict "root" $ "svc" "ingest").
*/}}
{{- define "memwright.serviceSecretEnv" -}}
{{- $root := .root -}}
{{- $k := $root.Values.secrets.keys -}}
{{- if and (has .svc (list "ingest" "api")) $root.Values.auth.hs256.enabled }}
{{- /* with a JWKS for RS256 the shared secret is optional: HS256 works if the key exists at pod start */}}
{{ include "memwright.secretEnv" (dict "root" $root "var" "MEMWRIGHT_JWT_SECRET" "key" $k.jwtSecret "optional" $root.Values.auth.jwks.enabled) }}
{{- end }}
{{- if has .svc (list "sweeper" "curator" "indexer" "api") }}
{{ include "memwright.pgSecretEnv" $root }}
{{- end }}
{{- if eq .svc "curator" }}
{{ include "memwright.secretEnv" (dict "root" $root "var" "MEMWRIGHT_LLM_API_KEY" "key" $k.llmApiKey "optional" true) }}
{{- end }}
{{- if eq .svc "indexer" }}
{{ include "memwright.secretEnv" (dict "root" $root "var" "MEMWRIGHT_QDRANT_API_KEY" "key" $k.qdrantApiKey "optional" true) }}
{{ include "memwright.secretEnv" (dict "root" $root "var" "MEMWRIGHT_EMBED_API_KEY" "key" $k.embedApiKey "optional" true) }}
{{- end }}
{{- end -}}

{{/*
Non-secret settings as ConfigMap data (NAME: "value"). The hook Job renders the same
lines as env, because the ConfigMap does not exist yet when a pre-install hook runs.
*/}}
{{- define "memwright.configData" -}}
MEMWRIGHT_LOG_LEVEL: {{ .Values.config.logLevel | quote }}
MEMWRIGHT_LOG_JSON: {{ .Values.config.logJson | quote }}
# In a pod the ports must be reachable from the kubelet and the Service (defaults are 127.0.0.1).
MEMWRIGHT_OPS_HOST: "0.0.0.0"
MEMWRIGHT_HTTP_HOST: "0.0.0.0"
MEMWRIGHT_KAFKA_BOOTSTRAP: {{ .Values.kafka.bootstrap | quote }}
MEMWRIGHT_TOPIC_SIGNALS: {{ .Values.kafka.topics.signals | quote }}
MEMWRIGHT_TOPIC_DLQ: {{ .Values.kafka.topics.dlq | quote }}
MEMWRIGHT_TOPIC_CHANGELOG: {{ .Values.kafka.topics.changelog | quote }}
MEMWRIGHT_TOPIC_CHANGES: {{ .Values.kafka.topics.changes | quote }}
MEMWRIGHT_TOPIC_REPLICATION: {{ .Values.kafka.replication | quote }}
{{- if not .Values.postgres.dsnFromSecret }}
MEMWRIGHT_PG_DSN: {{ include "memwright.pgDsn" . | quote }}
{{- end }}
MEMWRIGHT_QDRANT_URL: {{ .Values.qdrant.url | quote }}
MEMWRIGHT_QDRANT_COLLECTION: {{ .Values.qdrant.collection | quote }}
MEMWRIGHT_EMBEDDER: {{ .Values.embeddings.embedder | quote }}
MEMWRIGHT_EMBED_BASE_URL: {{ .Values.embeddings.baseUrl | quote }}
MEMWRIGHT_EMBED_MODEL: {{ .Values.embeddings.model | quote }}
MEMWRIGHT_JWT_ISSUER: {{ .Values.auth.issuer | quote }}
MEMWRIGHT_JWT_AUDIENCE: {{ .Values.auth.audience | quote }}
MEMWRIGHT_WINDOW_SECONDS: {{ .Values.sweeper.windowSeconds | quote }}
MEMWRIGHT_SWEEPER_SESSION_TIMEOUT_SECONDS: {{ .Values.sweeper.sessionTimeoutSeconds | quote }}
MEMWRIGHT_SWEEPER_DATA_DIR: "/var/lib/memwright/sweeper"
MEMWRIGHT_POLICY: {{ .Values.curator.policy | quote }}
MEMWRIGHT_CONCURRENCY: {{ .Values.curator.concurrency | quote }}
MEMWRIGHT_MEMORY_BUDGET: {{ .Values.curator.memoryBudget | quote }}
MEMWRIGHT_LLM_BASE_URL: {{ .Values.llm.baseUrl | quote }}
MEMWRIGHT_LLM_MODEL: {{ .Values.llm.model | quote }}
MEMWRIGHT_LLM_TIMEOUT_S: {{ .Values.llm.timeoutSeconds | quote }}
MEMWRIGHT_LLM_MAX_RETRIES: {{ .Values.llm.maxRetries | quote }}
MEMWRIGHT_LLM_MAX_STEPS: {{ .Values.llm.maxSteps | quote }}
MEMWRIGHT_DRIFT_CHECK_SECONDS: {{ .Values.indexer.driftCheckSeconds | quote }}
MEMWRIGHT_DRIFT_SETTLE_SECONDS: {{ .Values.indexer.driftSettleSeconds | quote }}
MEMWRIGHT_DRAIN_SECONDS: {{ .Values.indexer.drainSeconds | quote }}
{{- range $name, $value := .Values.config.extra }}
{{ $name }}: {{ $value | quote }}
{{- end }}
{{- end -}}


{{/* Where ingest and api find the JWKS file (auth.jwks): the directory is mounted, never the file
alone (subPath), so an updated ConfigMap or Secret reaches the pod. */}}
{{- define "memwright.jwksDir" -}}
/etc/memwright/jwks
{{- end -}}
