"""The Django app `safebeat.contrib.django`: safebeat's tables, their admin pages and checks."""

from __future__ import annotations

from django.apps import AppConfig


class SafebeatConfig(AppConfig):  # type: ignore[misc]  # Django is untyped here
    name = "safebeat.contrib.django"
    label = "safebeat"
    verbose_name = "safebeat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from safebeat.contrib.django import checks  # noqa: F401, PLC0415 - registers the checks
