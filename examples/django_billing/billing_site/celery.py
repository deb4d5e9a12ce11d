"""The Celery app, configured from Django's settings (`CELERY_*`), as Django projects do."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "billing_site.settings")

app = Celery("billing_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
