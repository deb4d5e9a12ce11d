{{- /*
The alert rules: the one source of the PrometheusRule and of monitoring/alerts.yaml (that
file is this template rendered with the default values; a test keeps it so, and
`python tests/chart/test_alert_rules_file.py` rewrites it). Runbooks: docs/metrics.md.

Prometheus's own templates in annotations are written {{` ... `}} so Helm leaves them.
"First increment" expressions: a per-entry counter appears at its first increment, which
increase() cannot see (it needs two samples); `(X unless X offset W)` is a series born
within W with its value, so the sum sees the first increment too, and a restart's new
series as well.
"Absent" expressions are per safebeat namespace: absent() alone fires only when no app at all
has the series, so one dead app beside a live one would never page. A namespace is known
from the series of its other processes (the beats, the exporter), or from its own series
within the last hour (`max_over_time(X[1h]) unless X`); absent() stays for "nothing at all".
*/}}
{{- define "safebeat.alertGroups" -}}
{{- $r := .Values.prometheusRule -}}
{{- $s := $r.selector -}}
{{- $p := ternary (printf "%s, " $s) "" (ne $s "") -}}
{{- $m := ternary (printf "{%s}" $s) "" (ne $s "") -}}
{{- $a := $r.alerts -}}
{{- $replicasLow := $a.SafebeatReplicasLow.threshold | default .Values.replicas -}}
{{- /* A range selector takes whole seconds, and more than none. */ -}}
{{- $staleWindow := max 60 (int $a.SafebeatExporterStale.thresholdSeconds) -}}
{{- $failing := printf "(max by (safebeat_namespace, entry) (safebeat_entry_last_failure_timestamp_seconds%s) > max by (safebeat_namespace, entry) (safebeat_entry_last_success_timestamp_seconds%s) or max by (safebeat_namespace, entry) (safebeat_entry_last_failure_timestamp_seconds%s) unless on (safebeat_namespace, entry) max by (safebeat_namespace, entry) (safebeat_entry_last_success_timestamp_seconds%s))" $m $m $m $m -}}
{{- $rules := list
  (dict "alert" "SafebeatEntriesOverdue"
    "expr" (printf "max by (safebeat_namespace) (safebeat_schedule_overdue_entries%s) > 0" $m)
    "summary" "{{ $value }} entries of {{ $labels.safebeat_namespace }} are overdue"
    "description" "Windows of {{ $value }} entries fell due and no replica decided them (sent or skipped) within the exporter's grace. Beat is down, cannot reach the store or the broker, or is too slow. This alert inhibits the per-entry SafebeatEntryOverdue.")
  (dict "alert" "SafebeatEntryOverdue"
    "expr" (printf "time() - max by (safebeat_namespace, entry) (safebeat_entry_next_due_timestamp_seconds%s) > %v" $m $a.SafebeatEntryOverdue.graceSeconds)
    "summary" "{{ $labels.entry }} is {{ $value | humanizeDuration }} past its due window"
    "description" "The oldest window of {{ $labels.entry }} ({{ $labels.safebeat_namespace }}) that no replica decided fell due {{ $value | humanizeDuration }} ago. Paused and finished entries never fire; the due window comes from the store, so restarts change nothing.")
  (dict "alert" "SafebeatEntryFailing"
    "expr" $failing
    "summary" "{{ $labels.entry }}: its latest run failed"
    "description" "The latest finished run of {{ $labels.entry }} ({{ $labels.safebeat_namespace }}) failed, and none succeeded since. Needs the worker hook.")
  (dict "alert" "SafebeatEntryPausedAfterFailures"
    "expr" (printf "max by (safebeat_namespace, entry) (safebeat_entry_paused%s) == 1 and on (safebeat_namespace, entry) %s or sum by (safebeat_namespace, entry) ((safebeat_paused_after_failures_total%s unless safebeat_paused_after_failures_total%s offset 1h) or increase(safebeat_paused_after_failures_total%s[1h])) > 0" $m $failing $m $m $m)
    "summary" "{{ $labels.entry }} is paused after failing runs"
    "description" "{{ $labels.entry }} ({{ $labels.safebeat_namespace }}) is paused and its latest run failed (pause_after_failures): it sends nothing until someone fixes the task and runs `safebeat resume`. Fires while it stays paused.")
  (dict "alert" "SafebeatNoSuccessfulTick"
    "expr" (printf "sum by (safebeat_namespace) (increase(safebeat_ticks_succeeded_total%s[10m])) == 0" $m)
    "summary" "no replica of {{ $labels.safebeat_namespace }} finished a tick in 10 minutes"
    "description" "Replicas run but none finished a tick without an error: nothing is claimed or sent (fail closed). Usually the store is unreachable (see SafebeatStoreErrors).")
  (dict "alert" "SafebeatNoReplica"
    "expr" (printf "(max by (safebeat_namespace) (safebeat_schedule_entries%s) or max by (safebeat_namespace) (max_over_time(safebeat_replica_info%s[1h]))) unless on (safebeat_namespace) max by (safebeat_namespace) (safebeat_replica_info%s) or absent(safebeat_replica_info%s)" $m $m $m $m)
    "summary" "no safebeat replica of {{ $labels.safebeat_namespace }} exports metrics"
    "description" "No beat replica of this namespace is scraped, while the store holds entries of it (the exporter says so) or a replica was scraped within the hour, or none matching the selector is: nothing is being scheduled.")
  (dict "alert" "SafebeatReplicasLow"
    "expr" (printf "max by (safebeat_namespace) (safebeat_replicas_alive%s) < %v" $m $replicasLow)
    "summary" "only {{ $value }} safebeat replica(s) of {{ $labels.safebeat_namespace }} are alive"
    "description" (printf "Fewer than %v replicas heartbeat in the store. Dispatch goes on with one, but the redundancy deployed is gone." $replicasLow))
  (dict "alert" "SafebeatExporterStale"
    "expr" (printf "max by (safebeat_namespace) (max_over_time(safebeat_exporter_store_up%s[%ds])) == 0 or time() - max by (safebeat_namespace) (safebeat_schedule_read_timestamp_seconds%s) > %v or (max by (safebeat_namespace) (safebeat_replica_info%s) or max by (safebeat_namespace) (max_over_time(safebeat_exporter_store_up%s[1h]))) unless on (safebeat_namespace) max by (safebeat_namespace) (safebeat_exporter_store_up%s) or absent(safebeat_exporter_store_up%s)" $m $staleWindow $m $a.SafebeatExporterStale.thresholdSeconds $m $m $m $m)
    "summary" "the schedule health of {{ $labels.safebeat_namespace }} is not read from the store"
    "description" "safebeat exporter of {{ $labels.safebeat_namespace }} cannot read the store (safebeat_exporter_store_up 0), has not read it for a while, or is not scraped while the namespace's beats are (or it was within the hour): the overdue, failing and unsent-claim alerts of this namespace are blind. Check the exporter's log (`cannot read the store`), its pod and the store.")
  (dict "alert" "SafebeatStoreErrors"
    "expr" (printf "sum by (safebeat_namespace) (rate(safebeat_store_errors_total{%skind!=\"tick_too_long\"}[5m])) > 0" $p)
    "summary" "replicas of {{ $labels.safebeat_namespace }} keep failing to reach the store"
    "description" "While this lasts they claim and send nothing (fail closed). Check the store and `safebeat doctor`.")
  (dict "alert" "SafebeatUnsentClaims"
    "expr" (printf "max by (safebeat_namespace) (safebeat_schedule_unsent_claims%s) > 0" $m)
    "summary" "{{ $value }} claims of {{ $labels.safebeat_namespace }} stay unsent"
    "description" "Windows were claimed but their publish was never confirmed, for longer than safebeat_claim_timeout: the broker is unreachable from the replicas, or none runs. They are re-published with the same task ids once one can.")
  (dict "alert" "SafebeatMessagesRejected"
    "expr" (printf "sum by (safebeat_namespace) ((safebeat_publish_errors_total{%skind=\"message\"} unless safebeat_publish_errors_total{%skind=\"message\"} offset 30m) or increase(safebeat_publish_errors_total{%skind=\"message\"}[30m])) > 0" $p $p $p)
    "summary" "windows of {{ $labels.safebeat_namespace }} were lost: their message could not be published"
    "description" "A window's message was refused for a reason retrying cannot fix (it does not serialize, it is too big) and recorded failed: that run is lost. `safebeat history` shows the error.")
  (dict "alert" "SafebeatWindowsSkipped"
    "expr" (printf "sum by (safebeat_namespace, entry, reason) ((safebeat_windows_skipped_total{%sreason=~\"missed|late|catchup_limit\"} unless safebeat_windows_skipped_total{%sreason=~\"missed|late|catchup_limit\"} offset 30m) or increase(safebeat_windows_skipped_total{%sreason=~\"missed|late|catchup_limit\"}[30m])) > 0" $p $p $p)
    "summary" "{{ $labels.entry }}: windows skipped ({{ $labels.reason }})"
    "description" "Windows of {{ $labels.entry }} were not sent because beat reached them too late (missed-window policy {{ $labels.reason }}): every replica was down or behind. `safebeat backfill` sends them if they are still wanted.")
  (dict "alert" "SafebeatEntryErrors"
    "expr" (printf "max by (safebeat_namespace, entry) (safebeat_entry_broken%s) > 0 or sum by (safebeat_namespace, entry) ((safebeat_entry_errors_total%s unless safebeat_entry_errors_total%s offset 30m) or increase(safebeat_entry_errors_total%s[30m])) > 0" $m $m $m $m)
    "summary" "{{ $labels.entry }} is malformed: beat skips it"
    "description" "The definition of {{ $labels.entry }} does not load, the store refuses its rows or its state does not read back, or its windows cannot be computed: beat puts it aside and the other entries run. Fires for as long as a beat holds it aside (safebeat_entry_broken). The beat log names the problem; `safebeat status` lists it under broken entries.")
  (dict "alert" "SafebeatRepublishSpike"
    "expr" (printf "sum by (safebeat_namespace) ((safebeat_republished_total%s unless safebeat_republished_total%s offset 15m) or increase(safebeat_republished_total%s[15m])) > %v" $m $m $m $a.SafebeatRepublishSpike.threshold)
    "summary" "{{ $value }} windows of {{ $labels.safebeat_namespace }} re-published in 15 minutes"
    "description" "Claims left unsent past safebeat_claim_timeout, or windows whose run died, were published again. A few follow a crash; many mean the broker drops publishes or workers die.")
  (dict "alert" "SafebeatTakeoverSpike"
    "expr" (printf "sum by (safebeat_namespace) ((safebeat_runs_taken_over_total%s unless safebeat_runs_taken_over_total%s offset 15m) or increase(safebeat_runs_taken_over_total%s[15m])) > %v" $m $m $m $a.SafebeatTakeoverSpike.threshold)
    "summary" "{{ $value }} runs of {{ $labels.safebeat_namespace }} taken over in 15 minutes"
    "description" "Workers ran windows again whose run had died (lease expired without a finish). Workers are killed (OOM, evictions) or stall longer than their lease.")
  (dict "alert" "SafebeatDispatchLagHigh"
    "expr" (printf "histogram_quantile(0.99, sum by (safebeat_namespace, le) (rate(safebeat_dispatch_lag_seconds_bucket%s[10m]))) > %v" $m $a.SafebeatDispatchLagHigh.thresholdSeconds)
    "summary" "windows of {{ $labels.safebeat_namespace }} reach the broker {{ $value | humanizeDuration }} late (p99)"
    "description" "The broker is slow or down, the store is slow (safebeat_tick_duration_seconds), or windows were sent late by the missed-window policy after an outage.")
  (dict "alert" "SafebeatDuplicateDeliveries"
    "expr" (printf "sum by (safebeat_namespace, entry) ((safebeat_duplicates_suppressed_total%s unless safebeat_duplicates_suppressed_total%s offset 30m) or increase(safebeat_duplicates_suppressed_total%s[30m])) > 0" $m $m $m)
    "summary" "{{ $labels.entry }}: a window was delivered more than once (skipped)"
    "description" "The worker hook skipped a second delivery of a finished window: nothing ran twice, but something delivers twice (a broker redelivery, a re-published claim).")
  (dict "alert" "SafebeatUntrackedExecutions"
    "expr" (printf "sum by (safebeat_namespace, entry) ((safebeat_executions_untracked_total%s unless safebeat_executions_untracked_total%s offset 30m) or increase(safebeat_executions_untracked_total%s[30m])) > 0" $m $m $m)
    "summary" "{{ $labels.entry }}: runs without the duplicate check; one may have run twice"
    "description" "The worker could not reach the store (it fails open, so no run is lost) or the window had no dispatch row. Check the task's side effects for those windows.")
-}}
- name: safebeat
  rules:
{{- range $rule := $rules }}
{{- $own := index $a $rule.alert }}
    - alert: {{ $rule.alert }}
      expr: {{ $rule.expr | quote }}
      {{- if and $own.for (ne (toString $own.for) "0s") }}
      for: {{ $own.for }}
      {{- end }}
      labels:
        severity: {{ $own.severity }}
        {{- with $r.extraAlertLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        summary: {{ $rule.summary | quote }}
        description: {{ $rule.description | quote }}
        runbook_url: {{ printf "%s#%s" $r.runbookBaseUrl (lower $rule.alert) | quote }}
        {{- with $r.dashboardUrl }}
        dashboard_url: {{ . | quote }}
        {{- end }}
{{- end }}
{{- end -}}
