"""Writing back to django-celery-beat's rows: only `last_run_at` and `total_run_count`,
and `enabled` where django-celery-beat's own scheduler turns a row off.

One `UPDATE` of those two columns a row (`total_run_count + 1` in the database, so two
writers never lose a count), so an edit made in the admin meanwhile is never overwritten,
and django-celery-beat's change marker does not move (replicas do not reload). A `one_off`
row is also disabled, and then the marker moves, so every replica drops it. A row whose
`expires` has passed is disabled, as django-celery-beat's `ModelEntry.is_due` does, without
moving the marker (as it does): every replica drops such a row by its clock anyway.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from safebeat.records import Claim


def record_runs(rows: Sequence[tuple[int, Claim]], one_off: Collection[str]) -> None:
    """Record that the window of each claim was sent for the row with that primary key."""
    from django.db.models import F  # noqa: PLC0415
    from django_celery_beat.models import PeriodicTask, PeriodicTasks  # noqa: PLC0415

    disabled = False
    for pk, claim in rows:
        fields: dict[str, object] = {
            "last_run_at": claim.window,
            "total_run_count": F("total_run_count") + 1,
        }
        if claim.entry in one_off:
            fields["enabled"] = False
            disabled = True
        PeriodicTask.objects.filter(pk=pk).update(**fields)
    if disabled:
        PeriodicTasks.update_changed()


def disable_expired(pks: Collection[int], now: datetime) -> int:
    """Disable the rows with these primary keys whose `expires` has passed at `now`; return
    how many were. A row whose `expires` was moved on meanwhile is left alone."""
    from django_celery_beat.models import PeriodicTask  # noqa: PLC0415

    return int(
        PeriodicTask.objects.filter(pk__in=list(pks), enabled=True, expires__lte=now).update(
            enabled=False
        )
    )
