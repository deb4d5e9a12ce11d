"""Django settings of the acceptance tests' project: everything from the environment.

SB_DATABASE_URL: the PostgreSQL database holding django-celery-beat's and safebeat's
tables; SB_BROKER_URL, SB_QUEUE: the broker and queue beat publishes to.
"""

import os

from tests.djangosite import postgres_database

SECRET_KEY = "safebeat-acceptance"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_celery_beat",
    "safebeat.contrib.django",
]
DATABASES = {"default": postgres_database(os.environ["SB_DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
CELERY_BROKER_URL = os.environ["SB_BROKER_URL"]
CELERY_TASK_DEFAULT_QUEUE = os.environ["SB_QUEUE"]
CELERY_RESULT_EXPIRES = None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_SAFEBEAT_URL = "django://"
