"""Django system checks (`manage.py check`) for hazards visible from the settings.

- safebeat.E001: a `CELERY_SAFEBEAT_*` setting is unknown or has a bad value.
- safebeat.E002: `CELERY_SAFEBEAT_URL = "django://<alias>"` names no database in DATABASES.
- safebeat.E003: the django:// store needs `USE_TZ = True`.
- safebeat.W001: no store is set: beat would use a SQLite file, which only beats on one
  host share; with this app installed, `django://` is one line away.
- safebeat.W002: database routers send safebeat's tables to another database than the
  one `CELERY_SAFEBEAT_URL` names (beat would write where the admin does not look).
- safebeat.W003: `CELERY_TIMEZONE` and `TIME_ZONE` disagree, so crontabs run in another
  zone than the rest of the project thinks in.
- safebeat.W004: `CELERY_TIMEZONE` is not set while `TIME_ZONE` is not UTC: new
  django-celery-beat crontabs default to UTC, not to `TIME_ZONE`.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks

from safebeat.config import DEFAULT_URL
from safebeat.errors import ConfigError


@checks.register("safebeat")  # type: ignore[untyped-decorator]
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Report mistakes in safebeat's settings and where its tables would live."""
    from safebeat.contrib.django.conf import settings_config  # noqa: PLC0415

    try:
        config = settings_config()
    except ConfigError as exc:
        return [checks.Error(str(exc), id="safebeat.E001")]
    if "url" not in config.sources:
        return [
            checks.Warning(
                f"CELERY_SAFEBEAT_URL is not set: beat uses {DEFAULT_URL}, which only beats "
                "on one host share, so beats in several pods would each send every window.",
                hint='Set CELERY_SAFEBEAT_URL = "django://" to keep safebeat\'s state in '
                "this project's database.",
                id="safebeat.W001",
            )
        ]
    if not config.url.startswith("django:"):
        return []
    return _django_store(config.url)


def _django_store(url: str) -> list[checks.CheckMessage]:
    from safebeat.stores.django import alias_of  # noqa: PLC0415

    alias = alias_of(url)
    if alias not in settings.DATABASES:
        return [
            checks.Error(
                f"CELERY_SAFEBEAT_URL = {url!r} names database {alias!r}, which is not in "
                f"DATABASES (known: {', '.join(sorted(settings.DATABASES))}).",
                id="safebeat.E002",
            )
        ]
    if not settings.USE_TZ:
        return [
            checks.Error(
                "The django:// store keeps instants in UTC and needs USE_TZ = True.",
                id="safebeat.E003",
            )
        ]
    from django.db import router  # noqa: PLC0415

    routed = router.db_for_write(apps.get_model("safebeat", "Dispatch"))
    if routed != alias:
        return [
            checks.Warning(
                f"CELERY_SAFEBEAT_URL = {url!r} keeps safebeat's tables in database {alias!r}, "
                f"but DATABASE_ROUTERS send the safebeat app's models to {routed!r}: the admin "
                "pages would show another database than the one beat writes.",
                hint=f'Route the "safebeat" app to {alias!r}, or set '
                f'CELERY_SAFEBEAT_URL = "django://{routed}".',
                id="safebeat.W002",
            )
        ]
    return []


@checks.register("safebeat")  # type: ignore[untyped-decorator]
def check_time_zones(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when Celery's and Django's time zones disagree."""
    django_zone = settings.TIME_ZONE or "UTC"
    celery_zone = getattr(settings, "CELERY_TIMEZONE", None)
    if celery_zone is not None and str(celery_zone) != django_zone:
        return [
            checks.Warning(
                f"CELERY_TIMEZONE = {celery_zone!r} but TIME_ZONE = {django_zone!r}: crontab "
                f"entries run in {celery_zone}, while dates in your code are {django_zone}'s.",
                hint="Use one zone for both, or give each crontab its own time zone.",
                id="safebeat.W003",
            )
        ]
    if celery_zone is None and django_zone != "UTC" and apps.is_installed("django_celery_beat"):
        return [
            checks.Warning(
                f"CELERY_TIMEZONE is not set and TIME_ZONE = {django_zone!r}: new "
                "django-celery-beat crontabs default to UTC, not to TIME_ZONE.",
                hint=f"Set CELERY_TIMEZONE = {django_zone!r}.",
                id="safebeat.W004",
            )
        ]
    return []
