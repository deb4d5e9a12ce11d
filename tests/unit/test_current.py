"""`safebeat.current_window()`: in a Celery task (with the window's local date in the
entry's zone), in a job an executor runs, and in a command `safebeat exec` started."""

from __future__ import annotations

import logging
from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab

import safebeat
from safebeat.beat.message_fields import headers_for
from safebeat.config import Config, load_config
from safebeat.current import (
    CurrentWindow,
    running,
    running_config,
    window_from_environment,
    window_of,
)
from safebeat.entries import Entry, compile_schedule
from safebeat.identity import format_window

WINDOW = CurrentWindow("weekly-report", datetime(2026, 3, 2, 3, 0, tzinfo=timezone.utc))


def test_a_job_sees_the_window_its_executor_set_and_nothing_after() -> None:
    """Inside `running(...)` the window and settings are the job's; outside, there is none."""
    config = Config(namespace="reports")
    with running(WINDOW, config):
        assert safebeat.current_window() == WINDOW
        assert running_config() is config
    assert safebeat.current_window() is None
    assert running_config() is None


def test_a_command_started_by_exec_reads_its_window_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SAFEBEAT_ENTRY and SAFEBEAT_WINDOW, as exec sets them, are the process's window."""
    monkeypatch.setenv("SAFEBEAT_ENTRY", "weekly-report")
    monkeypatch.setenv("SAFEBEAT_WINDOW", "2026-03-02T03:00:00Z")
    assert safebeat.current_window() == WINDOW


def test_a_malformed_window_variable_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A SAFEBEAT_WINDOW that is no instant gives no window, and says so."""
    with caplog.at_level(logging.WARNING, "safebeat"):
        found = window_from_environment({"SAFEBEAT_ENTRY": "x", "SAFEBEAT_WINDOW": "monday"})
    assert found is None
    assert "SAFEBEAT_WINDOW='monday' is not an ISO 8601 instant" in caplog.text


def test_the_window_variables_are_not_mistaken_for_settings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The variables exec reads and sets are no unknown settings to warn about."""
    environ = {
        "SAFEBEAT_ENTRY": "x",
        "SAFEBEAT_WINDOW": "2026-03-02T03:00:00Z",
        "SAFEBEAT_SCHEDULED_TIME": "2026-03-02T03:00:00+03:00",
        "SAFEBEAT_JOB_NAME": "x-29500000",
        "SAFEBEAT_WINDOWS": "typo",
    }
    with caplog.at_level(logging.WARNING, "safebeat"):
        load_config({}, environ=environ)
    assert "SAFEBEAT_WINDOWS" in caplog.text
    assert "'SAFEBEAT_WINDOW'" not in caplog.text
    assert "SAFEBEAT_JOB_NAME" not in caplog.text


def _compiled(schedule: object, options: dict[str, object] | None = None) -> Entry:
    raw = {"task": "t.report", "schedule": schedule, "options": options or {}}
    entries, broken = compile_schedule(
        {"daily": raw}, app_timezone=ZoneInfo("Europe/Berlin"), config=load_config({})
    )
    assert not broken
    return entries["daily"]


def test_a_task_reads_its_windows_local_date_in_the_entrys_zone() -> None:
    """A window just after midnight in Berlin is 23:30 UTC the day before: the message
    names the entry's zone, and `local_date` is the Berlin date a report is keyed on."""
    app = Celery("zones", set_as_current=False)
    app.conf.update(task_always_eager=True, timezone="Europe/Berlin")
    seen: list[CurrentWindow | None] = []

    @app.task(name="t.report")
    def report() -> None:
        seen.append(safebeat.current_window())

    window = datetime(2026, 2, 28, 23, 30, tzinfo=timezone.utc)
    headers = headers_for(_compiled(crontab(minute="30", hour="0")), format_window(window))
    assert headers["safebeat_timezone"] == "Europe/Berlin"
    report.apply(headers=headers)
    [found] = seen
    assert found is not None
    assert (found.window, found.local_date) == (window, date(2026, 3, 1))
    assert found.local.isoformat() == "2026-03-01T00:30:00+01:00"


def test_an_entry_in_utc_sends_no_zone_and_its_local_date_is_the_utc_date() -> None:
    headers = headers_for(
        _compiled(60.0, {"safebeat": {"timezone": "UTC"}}), "2026-02-28T23:30:00Z"
    )
    assert "safebeat_timezone" not in headers
    found = window_of(type("Request", (), {"headers": headers})())
    assert found is not None
    assert found.local_date == date(2026, 2, 28)


def test_a_message_without_a_zone_falls_back_to_the_given_one() -> None:
    """A message from an older beat names no zone: the worker's app zone stands in."""
    headers = {"safebeat_entry": "daily", "safebeat_window": "2026-02-28T23:30:00Z"}
    request = type("Request", (), {"headers": headers})()
    found = window_of(request, ZoneInfo("Europe/Berlin"))
    assert found is not None
    assert found.local_date == date(2026, 3, 1)
    headers["safebeat_timezone"] = "Not/AZone"
    assert window_of(request) == CurrentWindow("daily", found.window)  # UTC, with a warning
