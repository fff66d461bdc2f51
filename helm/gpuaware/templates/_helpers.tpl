{{/* Names, labels and the environment every service shares. */}}
{{- define "gpuaware.name" -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}{{- end -}}

{{- define "gpuaware.labels" -}}
app.kubernetes.io/part-of: gpuaware
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/name: {{ .name }}
{{- end -}}

{{- define "gpuaware.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/name: {{ .name }}
{{- end -}}

{{- define "gpuaware.image" -}}
{{ printf "%s/%s:%s" .root.Values.image.repository .image .root.Values.image.tag }}
{{- end -}}

{{- define "gpuaware.natsUrl" -}}
{{- if .Values.nats.bundled.enabled -}}
nats://{{ include "gpuaware.name" . }}-nats:4222
{{- else -}}
{{ .Values.nats.url }}
{{- end -}}
{{- end -}}

{{- define "gpuaware.natsSecret" -}}
{{ .Values.nats.auth.existingSecret | default (printf "%s-nats-credentials" (include "gpuaware.name" .)) }}
{{- end -}}

{{/* the owner's DSN (key `url`): the provisioning Job's alone */}}
{{- define "gpuaware.dbSecret" -}}
{{ .Values.database.existingSecret | default (printf "%s-database" (include "gpuaware.name" .)) }}
{{- end -}}

{{- define "gpuaware.hasDatabase" -}}
{{- if or .Values.database.url .Values.database.existingSecret .Values.database.bundled.enabled }}true{{ end -}}
{{- end -}}

{{/* The list of processes (files/processes.json, generated from schemas.processes by
`python -m gpuaware.k8s.chart`): every workload below is one of its entries. */}}
{{- define "gpuaware.processes" -}}
{{ .Files.Get "files/processes.json" }}
{{- end -}}

{{/* whether an entry of the list (.p) is deployed with these values (.root): "true" or "" */}}
{{- define "gpuaware.deployed" -}}
{{- $v := .root.Values -}}
{{- if eq .p.kind "Job" -}}
{{- if or $v.nats.provisionStreams (include "gpuaware.hasDatabase" .root) }}true{{ end -}}
{{- else if eq .p.name "alert-bridge" -}}
{{- if $v.alertBridge.alertmanagerUrl }}true{{ end -}}
{{- else if (index $v .p.values_key).enabled -}}
true
{{- end -}}
{{- end -}}

{{/* whether an entry (.p) calls the Kubernetes API with these values (.root): "true" or "" */}}
{{- define "gpuaware.usesKubernetes" -}}
{{- $v := .root.Values -}}
{{- if eq .p.name "binder" -}}
{{- if eq $v.binder.world "kubernetes" }}true{{ end -}}
{{- else if eq .p.name "placement" -}}
{{- if or (eq $v.placement.leaderElection "kubernetes") (and $v.extender.enabled $v.extender.bind) (eq $v.placement.policySource "crd") }}true{{ end -}}
{{- else if eq .p.name "quota" -}}
{{- if eq $v.quota.treeSource "crd" }}true{{ end -}}
{{- else if .p.kubernetes_api -}}
true
{{- end -}}
{{- end -}}

{{/* the binder serves the admission webhooks (only for a Kubernetes world) */}}
{{- define "gpuaware.webhooksOn" -}}
{{- if and .Values.webhooks.enabled .Values.binder.enabled (eq .Values.binder.world "kubernetes") }}true{{ end -}}
{{- end -}}

{{/* the Secret holding an entry's (.p) own database login: username, password, url */}}
{{- define "gpuaware.roleSecret" -}}
{{ printf "%s-db-%s" (include "gpuaware.name" .root) .p.name }}
{{- end -}}

{{/* a login role's DSN (.root, .login, .password): the owner's server and database, its own user */}}
{{- define "gpuaware.roleUrl" -}}
{{- $db := .root.Values.database -}}
{{- if $db.bundled.enabled -}}
postgresql://{{ .login }}:{{ .password }}@{{ include "gpuaware.name" .root }}-postgres:5432/{{ $db.bundled.database }}
{{- else if $db.url -}}
{{- $u := urlParse $db.url -}}
{{ $u.scheme }}://{{ .login }}:{{ .password }}@{{ $u.host }}{{ $u.path }}{{ if $u.query }}?{{ $u.query }}{{ end }}
{{- else if $db.server -}}
postgresql://{{ .login }}:{{ .password }}@{{ $db.server }}
{{- else -}}
{{- fail "database.server (host:port/database) is needed with database.existingSecret: each service's own login role connects there" -}}
{{- end -}}
{{- end -}}

{{/* env for one process: .root, .identity (NATS user), .prefix (its settings prefix), .database (the
Secret whose `url` is its DATABASE_URL; empty: none), .metrics (it serves metrics), .env (extra) */}}
{{- define "gpuaware.env" -}}
- name: NATS_URL
  value: {{ include "gpuaware.natsUrl" .root | quote }}
{{- if .root.Values.nats.tls.caSecret }}
- name: NATS_TLS_CA
  value: /etc/gpuaware/nats-ca/ca.crt
{{- end }}
{{- if .root.Values.nats.auth.enabled }}
- name: NATS_USER
  value: {{ .identity | quote }}
- name: NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "gpuaware.natsSecret" .root }}
      key: {{ .identity }}
{{- end }}
{{- if .database }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .database }}
      key: url
{{- end }}
- name: {{ .prefix }}CLUSTER
  value: {{ .root.Values.cluster | quote }}
{{- if and .root.Values.metrics.enabled .metrics }}
- name: {{ .prefix }}METRICS_PORT
  value: {{ .root.Values.metrics.port | quote }}
- name: {{ .prefix }}METRICS_ADDR
  value: "0.0.0.0"
{{- end }}
{{- range $k, $v := .env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* the pod-level pieces every gpuaware pod shares */}}
{{- define "gpuaware.podCommon" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
securityContext:
{{ toYaml .Values.podSecurityContext | indent 2 }}
{{- end -}}


{{/* NATS over TLS: the CA every client verifies the server with (nats.tls.caSecret, key ca.crt) */}}
{{- define "gpuaware.natsTlsMount" -}}
{{- if .Values.nats.tls.caSecret }}
- {name: nats-ca, mountPath: /etc/gpuaware/nats-ca, readOnly: true}
{{- end }}
{{- end -}}

{{- define "gpuaware.natsTlsVolume" -}}
{{- if .Values.nats.tls.caSecret }}
- name: nats-ca
  secret: {secretName: {{ .Values.nats.tls.caSecret }}, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- end -}}
