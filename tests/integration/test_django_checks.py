"""Django's system checks for safebeat's settings, run against real settings overrides."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django


def ids(**settings: object) -> list[str]:
    """The ids of the messages safebeat's checks report under `settings`."""
    from django.test import override_settings

    from safebeat.contrib.django.checks import check_settings, check_time_zones

    with override_settings(**settings):
        return [message.id for message in [*check_settings(), *check_time_zones()]]


def test_settings_hazards_are_reported(django_aliases: dict[str, str]) -> None:
    """Each hazard in the settings gets its own check id; good settings get none."""
    assert ids(CELERY_SAFEBEAT_URL="django://", CELERY_TIMEZONE="UTC") == []
    assert ids(CELERY_TIMEZONE="UTC") == ["safebeat.W001"]
    assert ids(CELERY_SAFEBEAT_URL="django://nowhere", CELERY_TIMEZONE="UTC") == ["safebeat.E002"]
    assert ids(CELERY_SAFEBEAT_URL="django://", CELERY_SAFEBEAT_MISFIRE="sometimes") == [
        "safebeat.E001"
    ]
    assert ids(CELERY_SAFEBEAT_URL="django://", USE_TZ=False, CELERY_TIMEZONE="UTC") == [
        "safebeat.E003"
    ]
    assert ids(
        CELERY_SAFEBEAT_URL="django://", TIME_ZONE="Europe/Moscow", CELERY_TIMEZONE="UTC"
    ) == ["safebeat.W003"]
    assert ids(CELERY_SAFEBEAT_URL="django://", TIME_ZONE="Europe/Moscow") == ["safebeat.W004"]


def test_a_router_sending_the_tables_elsewhere_is_reported(django_aliases: dict[str, str]) -> None:
    """The store on one alias while routers send safebeat's models to another: W002."""
    from django.db import router

    assert router.db_for_write(_dispatch()) == "default"
    messages = ids(CELERY_SAFEBEAT_URL="django://postgres", CELERY_TIMEZONE="UTC")
    assert messages == ["safebeat.W002"]


def _dispatch() -> type:
    from safebeat.contrib.django.models import Dispatch

    return Dispatch
