"""safebeat's tables as Django models: the same tables the `postgresql://` store creates.

The SQL files of the PostgreSQL store (`safebeat/stores/postgres/migrations/`) are the
schema's single source of truth: on PostgreSQL this app's migrations run exactly those
files, and on MySQL/MariaDB and SQLite they create these models, which a test compares
column by column with the tables the SQL files make. Instants are `timestamptz` in
PostgreSQL and UTC `datetime(6)` / text elsewhere (Django's `USE_TZ = True`).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from safebeat.contrib.django.fields import KeyField

#: Longest values the key columns hold in MySQL/MariaDB, where each unique key must fit
#: InnoDB's 3,072-byte index limit in utf8mb4 (4 bytes a character). PostgreSQL and SQLite
#: have no such limit.
NAMESPACE_LENGTH = 128
ENTRY_LENGTH = 512
REPLICA_LENGTH = 255
EFFECT_KEY_LENGTH = 640

STATUSES = ("claimed", "sent", "failed", "skipped")
OUTCOMES = ("success", "failure", "retry")


class Entry(models.Model):  # type: ignore[misc]  # Django is untyped here
    """The shared state of one schedule entry (one row per namespace and name)."""

    pk = models.CompositePrimaryKey("namespace", "name")
    namespace = KeyField(max_length=NAMESPACE_LENGTH)
    name = KeyField(max_length=ENTRY_LENGTH)
    schedule = models.TextField()
    digest = models.TextField()
    anchor = models.DateTimeField()
    defined_at = models.DateTimeField()
    last_window = models.DateTimeField(null=True)
    registered_by = models.TextField()
    # Set by pause / resume: the scheduler skips the windows of a paused entry (version 3).
    paused = models.BooleanField(db_default=False)
    # A pause's end (it ends by itself there) and the operator's note (version 5).
    paused_until = models.DateTimeField(null=True)
    pause_note = models.TextField(null=True)

    class Meta:
        db_table = "safebeat_entry"
        verbose_name = _("entry")
        verbose_name_plural = _("entries")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Dispatch(models.Model):  # type: ignore[misc]  # Django is untyped here
    """One claimed or skipped window: the dispatch marker, and what became of it."""

    id = models.BigAutoField(primary_key=True)
    namespace = KeyField(_("namespace"), max_length=NAMESPACE_LENGTH)
    entry = KeyField(_("entry"), max_length=ENTRY_LENGTH)
    window_at = models.DateTimeField(_("window"))
    status = models.TextField(_("status"), choices=[(s, s) for s in STATUSES])
    task_id = models.TextField(_("task id"), null=True)
    task_name = models.TextField(_("task name"), null=True)
    reason = models.TextField(_("reason"), null=True)
    skipped_from = models.DateTimeField(_("skipped from"), null=True)
    skipped_count = models.IntegerField(_("skipped count"), null=True)
    replica = models.TextField(_("replica"))
    host = models.TextField(_("host"))
    pid = models.IntegerField(_("pid"))
    claimed_at = models.DateTimeField(_("claimed at"))
    sent_at = models.DateTimeField(_("sent at"), null=True)
    attempts = models.IntegerField(_("attempts"), db_default=1)
    error = models.TextField(_("error"), null=True)
    # Execution, as the worker hook recorded it (schema version 2).
    started_at = models.DateTimeField(_("started at"), null=True)
    finished_at = models.DateTimeField(_("finished at"), null=True)
    outcome = models.TextField(_("outcome"), null=True, choices=[(o, o) for o in OUTCOMES])
    runtime = models.DurationField(_("runtime"), null=True)
    worker = models.TextField(_("worker"), null=True)
    retries = models.IntegerField(_("retries"), null=True)
    runs = models.IntegerField(_("runs"), db_default=0)
    duplicates = models.IntegerField(_("duplicates"), db_default=0)
    # The running execution is alive until then (schema version 4).
    lease_until = models.DateTimeField(_("lease until"), null=True)

    class Meta:
        db_table = "safebeat_dispatch"
        verbose_name = _("dispatch")
        verbose_name_plural = _("dispatches")
        constraints = [
            # The dispatch marker: one row per window, whoever inserts it first.
            models.UniqueConstraint(
                fields=["namespace", "entry", "window_at"], name="safebeat_dispatch_window"
            ),
            models.CheckConstraint(
                condition=Q(status__in=STATUSES), name="safebeat_dispatch_status_check"
            ),
            models.CheckConstraint(
                condition=Q(outcome__in=OUTCOMES), name="safebeat_dispatch_outcome_check"
            ),
        ]
        indexes = [
            models.Index(
                fields=["namespace", "claimed_at"],
                condition=Q(status="claimed"),
                name="safebeat_dispatch_unsent",
            ),
            models.Index(fields=["namespace", "claimed_at"], name="safebeat_dispatch_claimed_at"),
            models.Index(
                fields=["namespace", "entry", "started_at"],
                condition=Q(started_at__isnull=False) & Q(finished_at__isnull=True),
                name="safebeat_dispatch_running",
            ),
            # An entry's newest dispatched window in one probe (schema version 7): the
            # tick reads it past any number of skipped rows. Not on MySQL/MariaDB, which
            # have no partial index.
            models.Index(
                fields=["namespace", "entry", "window_at"],
                condition=Q(status__in=["claimed", "sent"]),
                name="safebeat_dispatch_dispatched",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.entry} @ {self.window_at.isoformat()}"


class Replica(models.Model):  # type: ignore[misc]  # Django is untyped here
    """A beat replica's last heartbeat."""

    pk = models.CompositePrimaryKey("namespace", "replica")
    namespace = KeyField(max_length=NAMESPACE_LENGTH)
    replica = KeyField(max_length=REPLICA_LENGTH)
    host = models.TextField()
    pid = models.IntegerField()
    version = models.TextField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    definitions = models.JSONField()

    class Meta:
        db_table = "safebeat_replica"
        verbose_name = _("replica")
        verbose_name_plural = _("replicas")

    def __str__(self) -> str:
        return self.replica


class Effect(models.Model):  # type: ignore[misc]  # Django is untyped here
    """An effect key recorded by `safebeat.claim()` (schema version 2)."""

    pk = models.CompositePrimaryKey("namespace", "key")
    namespace = KeyField(max_length=NAMESPACE_LENGTH)
    key = KeyField(max_length=EFFECT_KEY_LENGTH)
    owner = models.TextField()
    task_id = models.TextField(null=True)
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "safebeat_effect"
        verbose_name = _("effect")
        verbose_name_plural = _("effects")
        indexes = [
            models.Index(fields=["namespace", "expires_at"], name="safebeat_effect_expires_at")
        ]

    def __str__(self) -> str:
        return self.key


class Audit(models.Model):  # type: ignore[misc]  # Django is untyped here
    """One operator action: who did what, when (store time), to which entry and windows
    (schema version 5)."""

    id = models.BigAutoField(primary_key=True)
    namespace = KeyField(_("namespace"), max_length=NAMESPACE_LENGTH)
    at = models.DateTimeField(_("at"))
    actor = models.TextField(_("actor"))
    action = models.TextField(_("action"))
    entry = models.TextField(_("entry"), null=True)
    windows = models.JSONField(_("windows"))
    note = models.TextField(_("note"), null=True)

    class Meta:
        db_table = "safebeat_audit"
        verbose_name = _("operator action")
        verbose_name_plural = _("operator actions")
        indexes = [models.Index(fields=["namespace", "at"], name="safebeat_audit_at")]

    def __str__(self) -> str:
        return f"{self.action} {self.entry or ''} by {self.actor}"


class RuntimeEntry(models.Model):  # type: ignore[misc]  # Django is untyped here
    """An entry added at run time (`safebeat.schedules.add`), as JSON (schema version 6)."""

    pk = models.CompositePrimaryKey("namespace", "name")
    namespace = KeyField(max_length=NAMESPACE_LENGTH)
    name = KeyField(max_length=ENTRY_LENGTH)
    spec = models.TextField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "safebeat_runtime_entry"
        verbose_name = _("entry added at run time")
        verbose_name_plural = _("entries added at run time")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Counter(models.Model):  # type: ignore[misc]  # Django is untyped here
    """A counter of a namespace: `runtime_entries` counts the changes to `RuntimeEntry`
    rows, what replicas look at (schema version 6)."""

    pk = models.CompositePrimaryKey("namespace", "name")
    namespace = KeyField(max_length=NAMESPACE_LENGTH)
    name = KeyField(max_length=ENTRY_LENGTH)
    value = models.BigIntegerField()

    class Meta:
        db_table = "safebeat_counter"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}: {self.value}"
