{{/*
The beat container, and the templates an application's chart includes to run beat in its own
pods (sidecar mode). With this chart as a dependency named `safebeat`:

      containers:
        - name: web
          ...
        {{- include "safebeat.sidecar" . | nindent 8 }}
      volumes:
        {{- include "safebeat.sidecarVolumes" . | nindent 8 }}

Under an alias, pass its values: (dict "values" .Values.beat).
*/}}

{{/* The values of the safebeat chart, as seen from a parent chart's root context or a dict. */}}
{{- define "safebeat.sidecarValues" -}}
{{- if hasKey . "values" -}}
{{- toYaml .values -}}
{{- else -}}
{{- toYaml (required "safebeat.sidecar: no `safebeat` values here; include it from the root context of a chart that depends on safebeat, or pass (dict \"values\" .Values.<alias>)" (index .Values "safebeat")) -}}
{{- end -}}
{{- end -}}

{{- define "safebeat.sidecar" -}}
{{- $values := include "safebeat.sidecarValues" . | fromYaml -}}
{{- if ne $values.mode "sidecar" -}}
{{- fail "safebeat.sidecar: set safebeat.mode to sidecar, or the safebeat chart also runs a standalone Deployment" -}}
{{- end -}}
{{- include "safebeat.container" (dict "values" $values "sidecar" true) -}}
{{- end -}}

{{- define "safebeat.sidecarVolumes" -}}
{{- $values := include "safebeat.sidecarValues" . | fromYaml -}}
{{- include "safebeat.tmpVolume" $values -}}
{{- end -}}

{{/*
An HTTP probe of beat's own server (`safebeat_probe_port`): /livez or /readyz, answered from
memory, without importing the app or asking the store.
*/}}
{{- define "safebeat.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: beat-probes
periodSeconds: {{ .probe.periodSeconds }}
timeoutSeconds: {{ .probe.timeoutSeconds }}
failureThreshold: {{ .probe.failureThreshold }}
{{- end -}}

{{/*
The beat container, from (dict "values" <values of this chart> "sidecar" <bool>): `celery -A
<app> beat -S safebeat.Scheduler` with the store URL from the Secret.
*/}}
{{- define "safebeat.container" -}}
{{- $v := .values -}}
{{- $app := required "safebeat: set app, the Celery app as given to `celery -A` (for example proj)" $v.app -}}
{{- if and $v.metrics.enabled (eq (int $v.probes.port) (int $v.metrics.port)) -}}
{{- fail "safebeat: probes.port and metrics.port must differ: beat serves each on its own port" -}}
{{- end -}}
- name: beat
  image: {{ include "safebeat.image" $v | quote }}
  imagePullPolicy: {{ include "safebeat.pullPolicy" $v }}
  command:
    - celery
    - -A
    - {{ $app | quote }}
    - beat
    - -S
    - {{ $v.scheduler | quote }}
    - --loglevel
    - {{ $v.loglevel | quote }}
    {{- range $v.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    {{- include "safebeat.env" $v | nindent 4 }}
    - name: SAFEBEAT_PROBE_PORT
      value: {{ $v.probes.port | int | quote }}
    {{- if $v.metrics.enabled }}
    - name: SAFEBEAT_METRICS_PORT
      value: {{ $v.metrics.port | int | quote }}
    {{- end }}
    {{- if $v.migrate.enabled }}
    {{- if dig "auto_migrate" false $v.settings }}
    {{- fail "safebeat: settings.auto_migrate is true while migrate.enabled runs the migration Job; drop one" }}
    {{- end }}
    - name: SAFEBEAT_AUTO_MIGRATE
      value: "false"
    {{- else if hasKey $v.settings "auto_migrate" }}
    - name: SAFEBEAT_AUTO_MIGRATE
      value: {{ $v.settings.auto_migrate | toString | quote }}
    {{- end }}
    {{- with $v.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: beat-probes
      containerPort: {{ $v.probes.port | int }}
      protocol: TCP
    {{- if $v.metrics.enabled }}
    - name: beat-metrics
      containerPort: {{ $v.metrics.port | int }}
      protocol: TCP
    {{- end }}
  {{- if $v.probes.startup.enabled }}
  startupProbe:
    {{- include "safebeat.httpProbe" (dict "path" "/livez" "probe" $v.probes.startup) | nindent 4 }}
  {{- end }}
  {{- if $v.probes.liveness.enabled }}
  livenessProbe:
    {{- include "safebeat.httpProbe" (dict "path" "/livez" "probe" $v.probes.liveness) | nindent 4 }}
  {{- end }}
  {{- if and $v.probes.readiness.enabled (or (not .sidecar) $v.probes.readiness.sidecar) }}
  readinessProbe:
    {{- include "safebeat.httpProbe" (dict "path" "/readyz" "probe" $v.probes.readiness) | nindent 4 }}
  {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: safebeat-tmp
      mountPath: /tmp
{{- end -}}
