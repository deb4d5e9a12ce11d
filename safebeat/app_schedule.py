"""The schedule a Celery app's beat runs, compiled, for the CLI and the Django admin.

One answer to "which entries would beat run for this app, and which are broken": the
app's `beat_schedule` with stock beat's own entries, and, where beat reads them,
django-celery-beat's enabled `PeriodicTask` rows, a row winning over a setting of its
name, as `safebeat.contrib.django.DatabaseScheduler` does. Nothing here touches the
store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from celery import beat

from safebeat.config import Config
from safebeat.entries import Entry, compile_schedule
from safebeat.errors import EntryError

#: The scheduler beat runs for django-celery-beat's rows (and its subclasses).
DATABASE_SCHEDULER = "safebeat.contrib.django.DatabaseScheduler"


@dataclass(frozen=True)
class Schedule:
    """Compiled entries by name, and the errors of the entries beat would skip."""

    entries: dict[str, Entry] = field(default_factory=dict)
    broken: dict[str, EntryError] = field(default_factory=dict)

    def find(self, name: str) -> Entry | EntryError | None:
        """The entry `name`, its error if it is broken, or None if this schedule lacks it."""
        return self.entries.get(name) or self.broken.get(name)


def settings_source(app: Any) -> dict[str, Any]:
    """The raw `beat_schedule` items beat compiles: stock beat's own, then the app's."""
    stock: dict[str, Any] = {}
    if app.conf.result_expires and not app.backend.supports_autoexpire:
        stock["celery.backend_cleanup"] = {
            "task": "celery.backend_cleanup",
            "schedule": beat.crontab("0", "4", "*"),
            "options": {"expires": 12 * 3600},
        }
    return {**stock, **app.conf.beat_schedule}


def settings_schedule(app: Any, config: Config) -> Schedule:
    """The app's `beat_schedule` (with stock beat's entries), compiled as beat compiles it."""
    entries, broken = compile_schedule(
        settings_source(app), app_timezone=app.timezone, config=config
    )
    return Schedule(entries, broken)


def reads_periodic_tasks(app: Any) -> bool:
    """Whether this app's beat runs django-celery-beat's rows.

    True when `beat_scheduler` names safebeat's DatabaseScheduler, or, since `-S` on
    beat's command line is invisible here, when Django is configured and has
    `django_celery_beat` installed.
    """
    named = DATABASE_SCHEDULER in str(app.conf.beat_scheduler or "").replace(":", ".")
    try:
        import django  # noqa: PLC0415 - only for Django projects
        from django.apps import apps  # noqa: PLC0415
        from django.conf import settings  # noqa: PLC0415
    except ImportError:
        return False
    if not (named or settings.configured or os.environ.get("DJANGO_SETTINGS_MODULE")):
        return False
    if not apps.ready:
        django.setup()  # as DatabaseScheduler does
    return named or bool(apps.is_installed("django_celery_beat"))


def periodic_task_schedule(app: Any, config: Config) -> Schedule:
    """django-celery-beat's enabled, unexpired rows, compiled as DatabaseScheduler does."""
    if not reads_periodic_tasks(app):
        return Schedule()
    from safebeat.contrib.django.source import PeriodicTaskSource  # noqa: PLC0415

    app.loader.import_default_modules()  # register the project's tasks, as beat does
    now = datetime.now(timezone.utc)
    rows = PeriodicTaskSource(app, config, lambda: now).load()
    live = [row for row in rows if row.expires is None or row.expires > now]
    return Schedule(
        {row.name: row.entry for row in live if row.entry is not None},
        {row.name: row.error for row in live if row.error is not None},
    )


def beat_schedule(app: Any, config: Config) -> Schedule:
    """The schedule this app's beat runs: its settings' entries and its periodic tasks.

    A periodic task row wins over a `beat_schedule` item of the same name.
    """
    settings = settings_schedule(app, config)
    rows = periodic_task_schedule(app, config)
    shadowed = rows.entries.keys() | rows.broken.keys()
    entries = {n: e for n, e in settings.entries.items() if n not in shadowed}
    broken = {n: e for n, e in settings.broken.items() if n not in shadowed}
    return Schedule({**entries, **rows.entries}, {**broken, **rows.broken})
