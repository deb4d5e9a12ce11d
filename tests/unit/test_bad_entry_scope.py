"""What docs/windows.md promises of a bad entry ("reported by name, and the others keep
running"), case by case, and the one case it says safebeat cannot cover."""

from __future__ import annotations

import json
from datetime import timezone

import pytest
from celery import Celery
from celery.schedules import crontab

import safebeat.schedules
from safebeat.config import Config
from safebeat.entries.compiling import compile_schedule
from safebeat.entries.runtime_definitions import compile_runtime, encode
from safebeat.errors import EntryError
from safebeat.stores.memory import MemoryStore

UTC = timezone.utc


def test_cron_text_in_beat_schedule_is_reported_by_name_and_the_others_run() -> None:
    entries, errors = compile_schedule(
        {
            "typo": {"task": "t.typo", "schedule": "61 * * * *"},
            "fine": {"task": "t.fine", "schedule": crontab(minute="*/5")},
        },
        app_timezone=UTC,
        config=Config(),
    )
    assert list(entries) == ["fine"]
    assert str(errors["typo"]).startswith("schedule entry 'typo': schedule '61 * * * *' is text")
    assert "crontab(...)" in str(errors["typo"])


def test_cron_text_added_at_run_time_is_refused_by_name() -> None:
    app = Celery("scope", set_as_current=False)
    app.conf.safebeat_url = "memory://scope"
    with pytest.raises(EntryError) as raised:
        safebeat.schedules.add(app, "typo", "t.typo", "61 * * * *", store=MemoryStore())
    assert raised.value.entry == "typo"
    assert "Invalid end range: 61 > 59" in str(raised.value)


def test_a_stored_entry_that_no_longer_compiles_is_reported_by_name_and_the_others_run() -> None:
    bad = json.loads(encode("typo", "t.typo", "*/5 * * * *"))
    bad["schedule"] = {"crontab": "61 * * * *"}  # written by hand, or by an older release
    compiled = compile_runtime(
        {"typo": json.dumps(bad), "fine": encode("fine", "t.fine", "*/5 * * * *")},
        taken=(),
        app_timezone=UTC,
        config=Config(),
    )
    assert list(compiled.entries) == ["fine"]
    assert "schedule entry 'typo'" in str(compiled.broken["typo"])
    assert "Invalid end range: 61 > 59" in str(compiled.broken["typo"])


def test_a_crontab_object_celery_refuses_fails_before_safebeat_sees_the_schedule() -> None:
    """The limit the docs state: Celery raises while the module building beat_schedule is
    imported, with no entry named; nothing safebeat runs can catch that."""
    with pytest.raises(ValueError, match="Invalid end range: 61 > 59"):
        crontab(minute="61")
