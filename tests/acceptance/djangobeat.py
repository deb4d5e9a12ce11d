"""The Celery app of a Django project, as `proj/celery.py` writes it, for real beat processes."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.acceptance.djangosettings")

app = Celery("djangobeat")
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.task(name="billing.charge")
def charge() -> None:
    """What beat sends; no worker runs it in these tests."""
