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

{{- define "gpuaware.dbSecret" -}}
{{ .Values.database.existingSecret | default (printf "%s-database" (include "gpuaware.name" .)) }}
{{- end -}}

{{/* env for one service: .root, .identity (NATS user), .prefix (its settings prefix), .env (extra) */}}
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
{{- if or .root.Values.database.url .root.Values.database.existingSecret .root.Values.database.bundled.enabled }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "gpuaware.dbSecret" .root }}
      key: url
{{- end }}
- name: {{ .prefix }}CLUSTER
  value: {{ .root.Values.cluster | quote }}
{{- if .root.Values.metrics.enabled }}
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
