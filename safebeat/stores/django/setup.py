"""What the Django store needs from the project: Django set up, the app installed, USE_TZ on."""

from __future__ import annotations

import pkgutil
from types import ModuleType
from typing import Any

from safebeat.errors import StoreError

APP = "safebeat.contrib.django"
APP_LABEL = "safebeat"
_checked: set[str] = set()


def django_models(alias: str) -> ModuleType:
    """Return the app's models module once Django is ready for the store on `alias`.

    Sets Django up (from DJANGO_SETTINGS_MODULE) if nothing has yet; raises StoreError
    naming the setting that is missing or wrong.
    """
    if alias not in _checked:
        _check(alias)
        _checked.add(alias)
    from safebeat.contrib.django import models  # noqa: PLC0415

    return models


def _check(alias: str) -> None:
    try:
        import django  # noqa: PLC0415
        from django.apps import apps  # noqa: PLC0415
        from django.conf import settings  # noqa: PLC0415
        from django.core.exceptions import ImproperlyConfigured  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise StoreError(
            "the django:// store needs Django: pip install 'safebeat[django]'"
        ) from exc
    where = f"django://{alias}"
    if not apps.ready:
        try:
            django.setup()
        except ImproperlyConfigured as exc:
            raise StoreError(
                f"{where}: Django is not configured ({exc}); set DJANGO_SETTINGS_MODULE in "
                "the module that creates your Celery app"
            ) from exc
    if not apps.is_installed(APP):
        raise StoreError(f"{where}: add {APP!r} to INSTALLED_APPS (it holds safebeat's tables)")
    if alias not in settings.DATABASES:
        known = ", ".join(sorted(settings.DATABASES))
        raise StoreError(f"{where}: there is no database {alias!r} in DATABASES (known: {known})")
    if not settings.USE_TZ:
        raise StoreError(
            f"{where}: safebeat keeps instants in UTC and needs USE_TZ = True in your settings"
        )


def known_migrations() -> list[str]:
    """The names of the app's migrations, in order."""
    from safebeat.contrib.django import migrations  # noqa: PLC0415

    return sorted(
        info.name for info in pkgutil.iter_modules(migrations.__path__) if info.name[:4].isdigit()
    )


def migration_state(connection: Any) -> tuple[set[str], list[str]]:
    """Return (applied, known) migration names of the app on `connection`."""
    from django.db.migrations.recorder import MigrationRecorder  # noqa: PLC0415

    known = known_migrations()
    recorder = MigrationRecorder(connection)
    applied = (
        {name for app, name in recorder.applied_migrations() if app == APP_LABEL}
        if recorder.has_table()
        else set()
    )
    return applied, known
