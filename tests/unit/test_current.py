"""`safebeat.current_window()` outside a Celery task: in a job an executor runs, and in a
command `safebeat exec` started."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import pytest

import safebeat
from safebeat.config import Config, load_config
from safebeat.current import CurrentWindow, running, running_config, window_from_environment

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
