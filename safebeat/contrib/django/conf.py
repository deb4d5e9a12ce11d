"""safebeat's settings as a Django project writes them: `CELERY_SAFEBEAT_URL`, ...

With `app.config_from_object("django.conf:settings", namespace="CELERY")` Celery hands
these to beat through its own configuration, and `safebeat.config` reads them there.
This module reads the same settings straight from Django's, for code that runs without
beat's app at hand: the system checks.
"""

from __future__ import annotations

from safebeat.config import Config, load_config


def settings_config(namespace: str = "CELERY") -> Config:
    """Read the `<namespace>_SAFEBEAT_*` settings (and `SAFEBEAT_*` variables); see load_config."""
    from django.conf import settings  # noqa: PLC0415

    conf = {name: getattr(settings, name) for name in dir(settings) if "SAFEBEAT_" in name}
    return load_config(conf, app_namespace=namespace)
