"""Fixtures shared by the Django admin's test files; test_django_admin.py defines them."""

from tests.integration.test_django_admin import celery_app, client, safebeat_db

__all__ = ["celery_app", "client", "safebeat_db"]
