"""What the Django store needs from the project: Django set up, the app installed, USE_TZ on.

The app's models and migrations are found through Django's app registry (by the app's
label), so the store does not import `safebeat.contrib.django`: the app depends on the
store's package, never the other way round.
"""

from __future__ import annotations

import importlib
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
    from django.apps import apps  # noqa: PLC0415

    models: ModuleType = apps.get_app_config(APP_LABEL).models_module
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


def known_migrations(alias: str) -> list[str]:
    """The names of the app's migrations, in order."""
    from django.apps import apps  # noqa: PLC0415

    django_models(alias)
    migrations = importlib.import_module(f"{apps.get_app_config(APP_LABEL).name}.migrations")
    return sorted(
        info.name for info in pkgutil.iter_modules(migrations.__path__) if info.name[:4].isdigit()
    )


def migration_state(connection: Any) -> tuple[set[str], list[str]]:
    """Return (applied, known) migration names of the app on `connection`."""
    from django.db.migrations.recorder import MigrationRecorder  # noqa: PLC0415

    known = known_migrations(connection.alias)
    recorder = MigrationRecorder(connection)
    applied = (
        {name for app, name in recorder.applied_migrations() if app == APP_LABEL}
        if recorder.has_table()
        else set()
    )
    return applied, known
