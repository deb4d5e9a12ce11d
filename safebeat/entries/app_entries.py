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
from celery.app.defaults import DEFAULTS
from celery.utils.imports import load_extension_class_names, symbol_by_name

from safebeat.config import Config
from safebeat.entries import Entry, compile_schedule
from safebeat.errors import EntryError, ScheduleError

#: The scheduler beat runs for django-celery-beat's rows (and its subclasses).
DATABASE_SCHEDULER = "safebeat.contrib.django.DatabaseScheduler"
_DATABASE_SCHEDULER_CLASS = "safebeat.contrib.django.scheduler.DatabaseScheduler"
#: `beat_scheduler` when the app leaves it alone: the scheduler then is `-S`'s, unseen here.
CELERY_DEFAULT_SCHEDULER = DEFAULTS["beat_scheduler"]


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


def periodic_tasks_reason(app: Any) -> str | None:
    """Why this app's beat runs django-celery-beat's rows, or None when it does not.

    A `beat_scheduler` that names a scheduler decides: safebeat's DatabaseScheduler (or a
    subclass) runs the rows, any other scheduler does not. Left at Celery's default, it
    says nothing (beat's `-S` is not visible here): then the rows are run when the app's
    Django project (configured, or named by DJANGO_SETTINGS_MODULE) has
    `django_celery_beat` installed.
    """
    named = _named_scheduler(app)
    if named is not None and not _runs_rows(named):
        return None
    try:
        import django  # noqa: PLC0415 - only for Django projects
        from django.apps import apps  # noqa: PLC0415
        from django.conf import settings  # noqa: PLC0415
    except ImportError:
        return None
    if named is None and not (settings.configured or os.environ.get("DJANGO_SETTINGS_MODULE")):
        return None
    if not apps.ready:
        django.setup()  # as DatabaseScheduler does
    if named is not None:
        return f"beat_scheduler names {named}"
    if not apps.is_installed("django_celery_beat"):
        return None
    return (
        "the Django project has django_celery_beat installed and beat_scheduler is "
        "Celery's default (beat's -S is not visible here)"
    )


def _named_scheduler(app: Any) -> str | None:
    """The scheduler `beat_scheduler` names, or None when it is left at Celery's default."""
    name = str(app.conf.beat_scheduler or "")
    return None if name in ("", CELERY_DEFAULT_SCHEDULER) else name


def _runs_rows(name: str) -> bool:
    """Whether the scheduler class `name` is safebeat's DatabaseScheduler or a subclass."""
    if DATABASE_SCHEDULER in name.replace(":", "."):
        return True
    aliases = dict(load_extension_class_names("celery.beat_schedulers"))  # as beat does
    try:
        scheduler = symbol_by_name(name, aliases=aliases)
    except Exception:  # noqa: BLE001 - importing a project's module may raise anything
        return False  # beat cannot load it here either, and it names no DatabaseScheduler
    # Compared by name: importing DatabaseScheduler here could load Django's models early.
    return any(
        f"{cls.__module__}.{cls.__qualname__}" == _DATABASE_SCHEDULER_CLASS
        for cls in getattr(scheduler, "__mro__", ())
    )


def periodic_task_schedule(app: Any, config: Config) -> Schedule:
    """django-celery-beat's enabled, unexpired rows, compiled as DatabaseScheduler does.

    Raises ScheduleError when beat would run the rows but they cannot be read (the tables
    are not migrated, the database is down), saying why they are read and what to do.
    """
    reason = periodic_tasks_reason(app)
    if reason is None:
        return Schedule()
    from django.db import DatabaseError  # noqa: PLC0415

    from safebeat.contrib.django.source import PeriodicTaskSource  # noqa: PLC0415

    app.loader.import_default_modules()  # register the project's tasks, as beat does
    now = datetime.now(timezone.utc)
    try:
        rows = PeriodicTaskSource(app, config, lambda: now).load()
    except DatabaseError as exc:
        raise ScheduleError(
            f"cannot read django-celery-beat's periodic tasks ({exc}), which this app's "
            f"beat runs because {reason}: run `python manage.py migrate django_celery_beat` "
            "if beat runs safebeat.contrib.django.DatabaseScheduler, else set beat_scheduler "
            "(CELERY_BEAT_SCHEDULER in Django settings) to the scheduler beat runs, such as "
            "'safebeat.Scheduler'"
        ) from exc
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
