"""`safebeat doctor` checks that read only the settings (no store or broker is contacted)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from safebeat.config import Config, config_from_app
from safebeat.ops.doctor import (
    Context,
    Level,
    check_lock_timeout,
    check_publisher_confirms,
    check_scheduler,
    check_store_url,
)
from safebeat.stores.memory import MemoryStore


def confirms_finding(broker: str, **transport_options: Any) -> tuple[Level, str]:
    app = Celery("doctor", broker=broker, set_as_current=False)
    app.conf.broker_transport_options = transport_options
    [finding] = check_publisher_confirms(Context(MemoryStore(), Config(), app=app))
    return finding.level, finding.message


def test_amqp_without_publisher_confirms_is_a_warning_naming_the_setting() -> None:
    """On RabbitMQ without confirm_publish, doctor warns that 'sent' can be lost, and says
    which setting turns confirms on, without the broker's password."""
    level, message = confirms_finding("amqp://beat:hunter2@rabbit:5672//")
    assert level is Level.WARNING
    assert "broker_transport_options = {'confirm_publish': True}" in message
    assert "hunter2" not in message


@pytest.mark.parametrize(
    ("broker", "options"),
    [
        ("amqp://guest:guest@rabbit:5672//", {"confirm_publish": True}),
        ("pyamqp://guest:guest@rabbit:5672//", {"confirm_publish": True}),
        ("redis://127.0.0.1:6379/0", {}),
    ],
)
def test_confirmed_amqp_and_other_transports_are_ok(broker: str, options: dict[str, Any]) -> None:
    """AMQP with confirm_publish, and transports without confirms to ask for, pass."""
    level, message = confirms_finding(broker, **options)
    assert level is Level.OK
    assert "sent" in message


def test_without_the_app_the_check_is_skipped_saying_why() -> None:
    """Without -A the broker is unknown: the check says it was skipped and why."""
    [finding] = check_publisher_confirms(Context(MemoryStore(), Config()))
    assert finding.level is Level.OK
    assert "needs -A" in finding.message


@pytest.mark.parametrize(
    ("scheduler", "level", "words"),
    [
        ("safebeat.Schedular", Level.PROBLEM, "did you mean 'safebeat.Scheduler'?"),
        (
            "safebeat.contrib.django.DatabaseSchedular",
            Level.PROBLEM,
            "did you mean 'safebeat.contrib.django.DatabaseScheduler'?",
        ),
        ("safebeat.Scheduler", Level.OK, "is safebeat's"),
        ("safebeat.contrib.django:DatabaseScheduler", Level.OK, "is safebeat's"),
        ("celery.beat:PersistentScheduler", Level.OK, "-S safebeat.Scheduler"),
        ("celery.beat:Scheduler", Level.WARNING, "each replica sends every window"),
        (
            "django_celery_beat.schedulers:DatabaseScheduler",
            Level.WARNING,
            "set beat_scheduler = 'safebeat.contrib.django.DatabaseScheduler'",
        ),
        (
            "django_celery_beat.schedulers.DatabaseScheduler",
            Level.WARNING,
            "it runs the same PeriodicTask rows",
        ),
    ],
)
def test_a_misspelt_scheduler_in_the_apps_configuration_is_a_problem_naming_the_closest(
    scheduler: str, level: Level, words: str
) -> None:
    app = Celery("doctor", broker="memory://", set_as_current=False)
    app.conf.beat_scheduler = scheduler
    [finding] = check_scheduler(Context(MemoryStore(), Config(), app=app))
    assert (finding.check, finding.level) == ("scheduler", level)
    assert words in finding.message


def test_the_store_url_says_where_it_came_from_and_a_shadowed_setting_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = Celery("doctor", broker="memory://", set_as_current=False)
    app.conf.safebeat_url = "postgresql://app:s3cr3t@db/app"
    monkeypatch.delenv("SAFEBEAT_URL", raising=False)
    [finding] = check_store_url(Context(MemoryStore(), config_from_app(app), app=app))
    assert finding.level is Level.OK
    assert finding.message == "postgresql://app:***@db/app from the safebeat_url setting"

    monkeypatch.setenv("SAFEBEAT_URL", "postgresql://app:s3cr3t@olddb/app")
    [finding] = check_store_url(Context(MemoryStore(), config_from_app(app), app=app))
    assert finding.level is Level.WARNING
    assert finding.message.startswith(
        "SAFEBEAT_URL (postgresql://app:***@olddb/app) wins over the app's safebeat_url "
        "(postgresql://app:***@db/app)"
    )
    assert "s3cr3t" not in finding.message

    monkeypatch.setenv("SAFEBEAT_URL", "postgresql://app:s3cr3t@db/app")
    [finding] = check_store_url(Context(MemoryStore(), config_from_app(app), app=app))
    assert finding.level is Level.OK
    assert "from the SAFEBEAT_URL environment variable" in finding.message


def lock_findings(**conf: Any) -> list[Any]:
    app = Celery("doctor", set_as_current=False)
    app.conf.update(conf)
    return check_lock_timeout(Context(MemoryStore(), config_from_app(app, environ={})))


def test_the_default_lock_timeout_is_at_most_half_the_default_lease() -> None:
    """The defaults (5 s of a 10 s lease) leave a blocked renewal's retry inside the lease:
    no warning."""
    assert Config().lock_timeout * 2 <= Config().execution_lease
    assert lock_findings() == []
    assert lock_findings(safebeat_lock_timeout=15, safebeat_execution_lease=30) == []


def test_a_lock_timeout_above_half_the_lease_is_a_warning_naming_both_settings() -> None:
    """A lock timeout above half the lease (a blocked renewal retried too late) is a
    warning that names both settings as they were set, with their values."""
    [finding] = lock_findings(safebeat_lock_timeout=6)
    assert finding.level is Level.WARNING
    assert "safebeat_lock_timeout (6s)" in finding.message
    assert "safebeat_execution_lease (10s)" in finding.message
    [finding] = lock_findings(safebeat_lock_timeout=5, safebeat_execution_lease=8)
    assert "safebeat_execution_lease (8s)" in finding.message
