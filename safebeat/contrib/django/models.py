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

    class Meta:
        db_table = "safebeat_entry"
        verbose_name_plural = "entries"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Dispatch(models.Model):  # type: ignore[misc]  # Django is untyped here
    """One claimed or skipped window: the dispatch marker, and what became of it."""

    id = models.BigAutoField(primary_key=True)
    namespace = KeyField(max_length=NAMESPACE_LENGTH)
    entry = KeyField(max_length=ENTRY_LENGTH)
    window_at = models.DateTimeField("window")
    status = models.TextField(choices=[(s, s) for s in STATUSES])
    task_id = models.TextField(null=True)
    task_name = models.TextField(null=True)
    reason = models.TextField(null=True)
    skipped_from = models.DateTimeField(null=True)
    skipped_count = models.IntegerField(null=True)
    replica = models.TextField()
    host = models.TextField()
    pid = models.IntegerField()
    claimed_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True)
    attempts = models.IntegerField(db_default=1)
    error = models.TextField(null=True)
    # Execution, as the worker hook recorded it (schema version 2).
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    outcome = models.TextField(null=True, choices=[(o, o) for o in OUTCOMES])
    runtime = models.DurationField(null=True)
    worker = models.TextField(null=True)
    retries = models.IntegerField(null=True)
    runs = models.IntegerField(db_default=0)
    duplicates = models.IntegerField(db_default=0)

    class Meta:
        db_table = "safebeat_dispatch"
        verbose_name_plural = "dispatches"
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
        indexes = [
            models.Index(fields=["namespace", "expires_at"], name="safebeat_effect_expires_at")
        ]

    def __str__(self) -> str:
        return self.key
