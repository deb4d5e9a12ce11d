{{/*
Names, labels and the pieces every pod of this chart shares. The beat container itself is
defined in _sidecar.tpl, so that an application's chart can include it.
*/}}

{{- define "safebeat.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "safebeat.fullname" -}}
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

{{/* Labels of every object, without a component. */}}
{{- define "safebeat.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "safebeat.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector of the standalone beat pods: the Deployment, the PDB and the metrics Service. */}}
{{- define "safebeat.selectorLabels" -}}
app.kubernetes.io/name: {{ include "safebeat.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: beat
{{- end -}}

{{/*
The image reference, from a values map: image.repository, else global.image.repository (a
parent chart's image); a digest wins over a tag.
*/}}
{{- define "safebeat.image" -}}
{{- $image := .image | default dict -}}
{{- $global := dig "image" dict (.global | default dict) -}}
{{- $repository := $image.repository | default $global.repository -}}
{{- $repository = required "safebeat: set image.repository (your application's image, with safebeat installed) or global.image.repository" $repository -}}
{{- $digest := $image.digest | default $global.digest -}}
{{- $tag := $image.tag | default $global.tag -}}
{{- if $digest -}}
{{- printf "%s@%s" $repository $digest -}}
{{- else if $tag -}}
{{- printf "%s:%s" $repository (toString $tag) -}}
{{- else -}}
{{- $repository -}}
{{- end -}}
{{- end -}}

{{- define "safebeat.pullPolicy" -}}
{{- $image := .image | default dict -}}
{{- $global := dig "image" dict (.global | default dict) -}}
{{- $image.pullPolicy | default $global.pullPolicy | default "IfNotPresent" -}}
{{- end -}}

{{/*
A setting's value as environment text. Numbers arrive as floats: 1000000 must become
"1000000", not "1e+06".
*/}}
{{- define "safebeat.envText" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
The environment of beat and of the migration Job, from a values map: the store URL from the
Secret, then the settings, then the user's variables.
*/}}
{{- define "safebeat.env" -}}
{{- $secret := required "safebeat: set store.existingSecret, the name of an existing Secret holding the store URL" .store.existingSecret -}}
- name: SAFEBEAT_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: {{ .store.secretKey | quote }}
{{- range $key, $value := .settings }}
{{- if ne $key "auto_migrate" }}
- name: {{ printf "SAFEBEAT_%s" (upper $key) }}
  value: {{ include "safebeat.envText" $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The /tmp volume, from a values map. */}}
{{- define "safebeat.tmpVolume" -}}
- name: safebeat-tmp
  {{- if .tmpVolume.sizeLimit }}
  emptyDir:
    sizeLimit: {{ .tmpVolume.sizeLimit }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end -}}

{{/* Scheduling and identity fields shared by the standalone pods and the migration Job. */}}
{{- define "safebeat.podCommon" -}}
enableServiceLinks: false
automountServiceAccountToken: false
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
