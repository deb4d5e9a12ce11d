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
parent chart's image); a digest wins over a tag. A tag or a digest is required, and `latest`
is refused: pods pulling a moving tag at different times run different schedules.
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
{{- else if and $tag (ne (toString $tag) "latest") -}}
{{- printf "%s:%s" $repository (toString $tag) -}}
{{- else -}}
{{- fail "safebeat: set image.tag (not latest) or image.digest, or global.image.tag: every beat must run the same release of your app" -}}
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

{{/*
kube-linter waivers: `ignore-check.kube-linter.io/<check>` annotations, each with its reason,
for the default checks an object fails on purpose. From (dict "root" . "checks" (list ...)),
`checks` naming the waivers that may apply to the object; each is added only when it does.
*/}}
{{- define "safebeat.lintWaivers" -}}
{{- $v := .root.Values -}}
{{- $waivers := dict -}}
{{- if and (has "no-anti-affinity" .checks) $v.spreadAcrossNodes (not (dig "podAntiAffinity" nil ($v.affinity | default dict))) -}}
{{- $_ := set $waivers "ignore-check.kube-linter.io/no-anti-affinity" "spreadAcrossNodes spreads the beats over nodes with a topologySpreadConstraint on kubernetes.io/hostname, which this check does not read" -}}
{{- end -}}
{{- if and (has "non-existent-service-account" .checks) $v.serviceAccountName -}}
{{- $_ := set $waivers "ignore-check.kube-linter.io/non-existent-service-account" "serviceAccountName names an account created outside this chart (for a cloud identity)" -}}
{{- end -}}
{{- if and (has "dangling-service" .checks) (eq $v.mode "sidecar") -}}
{{- $_ := set $waivers "ignore-check.kube-linter.io/dangling-service" "sidecar mode: the Service selects the application's pods (metrics.podSelector), which the parent chart renders" -}}
{{- end -}}
{{- with $waivers -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/*
Refuse a ServiceMonitor and a PodMonitor of the same pods: Prometheus would scrape each pod
twice, under two jobs, and every sum and count in the alerts and the dashboard would double.
Included by every template that renders either monitor.
*/}}
{{- define "safebeat.oneMonitor" -}}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled -}}
{{- fail "safebeat: metrics.serviceMonitor.enabled and metrics.podMonitor.enabled are both true: Prometheus would scrape the beats (and the exporter) twice, doubling every series the alerts sum. Enable one of them" -}}
{{- end -}}
{{- end -}}

{{/*
Refuse a PodDisruptionBudget no drain could ever satisfy: minAvailable, as a number or as a
percentage (Kubernetes rounds a percentage of minAvailable up), keeping every replica.
*/}}
{{- define "safebeat.pdbCheck" -}}
{{- $pdb := .Values.podDisruptionBudget -}}
{{- $replicas := int .Values.replicas -}}
{{- if hasKey $pdb "minAvailable" -}}
{{- $min := $pdb.minAvailable -}}
{{- if kindIs "string" $min -}}
{{- $kept := div (add (mul (int (trimSuffix "%" $min)) $replicas) 99) 100 -}}
{{- if and (gt $replicas 0) (ge $kept $replicas) -}}
{{- fail (printf "safebeat: podDisruptionBudget.minAvailable (%s of %d replicas, rounded up: %d) keeps every replica, so no node could ever be drained; lower it, or use maxUnavailable" $min $replicas $kept) -}}
{{- end -}}
{{- else if ge (int $min) $replicas -}}
{{- fail (printf "safebeat: podDisruptionBudget.minAvailable (%d) must be below replicas (%d), or no node could ever be drained" (int $min) $replicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}
