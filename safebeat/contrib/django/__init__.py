"""safebeat for Django: the app (tables, admin, checks), the `django://` store and a
django-celery-beat schedule source.

Add `"safebeat.contrib.django"` to `INSTALLED_APPS`, set `CELERY_SAFEBEAT_URL = "django://"`
and run beat with `-S safebeat.contrib.django.DatabaseScheduler` to read django-celery-beat's
`PeriodicTask` rows. Nothing here touches models at import time, so Django can load the app.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DatabaseScheduler"]


def __getattr__(name: str) -> Any:
    # `-S safebeat.contrib.django.DatabaseScheduler` resolves this attribute after Django
    # is set up; importing the scheduler earlier would load models before the app registry.
    if name == "DatabaseScheduler":
        from safebeat.contrib.django.scheduler import DatabaseScheduler  # noqa: PLC0415

        return DatabaseScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
