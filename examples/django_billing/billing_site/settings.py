"""Settings of the billing example. From the environment: BILLING_DATABASE_URL (PostgreSQL)
and BILLING_BROKER_FOLDER (kombu's filesystem broker, so no broker server is needed)."""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

_db = urlsplit(os.environ.get("BILLING_DATABASE_URL", "postgresql://postgres@127.0.0.1/billing"))
_broker = Path(os.environ.get("BILLING_BROKER_FOLDER", "broker")).resolve()

SECRET_KEY = "billing-example-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_celery_beat",
    "safebeat.contrib.django",
    "charges",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.path.lstrip("/"),
        "USER": unquote(_db.username or ""),
        "PASSWORD": unquote(_db.password or ""),
        "HOST": _db.hostname or "",
        "PORT": str(_db.port or ""),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CELERY_TIMEZONE = TIME_ZONE
CELERY_BROKER_URL = "filesystem://"
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "data_folder_in": str(_broker),
    "data_folder_out": str(_broker),
    "processed_folder": str(_broker / "processed"),
    "control_folder": str(_broker / "control"),
}
CELERY_RESULT_EXPIRES = None
# safebeat keeps its claims in this project's own database (used by safebeat's scheduler
# only; stock beat ignores it).
CELERY_SAFEBEAT_URL = "django://"
