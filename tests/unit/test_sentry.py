"""Sentry Crons with safebeat: the real sentry_sdk and its Celery integration, check-ins kept."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta, timezone
from typing import Any

import pytest
import sentry_sdk
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.schedules import crontab
from sentry_sdk.integrations.celery import CeleryIntegration

import safebeat.worker
from safebeat.beat.publishing import Publisher
from safebeat.config import Config
from safebeat.contrib.sentry import monitor_config
from safebeat.entries import compile_entry
from safebeat.identity import Replica, task_id_for
from safebeat.stores.memory import MemoryStore
from safebeat.stores.per_process import store_of
from safebeat.stores.protocols import NewClaim, TickPlan
from safebeat.testing import FakeClock, memory_scheduler
from tests.sentrycapture import DSN, CheckIns
from tests.unit.test_scheduler import START, drain, make_app, run


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sentry() -> Iterator[list[dict[str, object]]]:
    """Sentry initialised with the Celery integration monitoring beat; the check-ins sent."""
    CheckIns.seen = []
    sentry_sdk.init(
        dsn=DSN,
        integrations=[CeleryIntegration(monitor_beat_tasks=True, exclude_beat_tasks=["quiet-.*"])],
        transport=CheckIns,
        default_integrations=False,
    )
    yield CheckIns.seen
    sentry_sdk.get_client().close()
    sentry_sdk.get_global_scope().set_client(None)


def entry(schedule: object, **safebeat: object) -> object:
    raw = {"task": "t.run", "schedule": schedule, "options": {"safebeat": safebeat}}
    return compile_entry("e", raw, app_timezone=timezone.utc, config=Config())


@pytest.mark.parametrize(
    ("schedule", "options", "expected"),
    [
        (
            crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"),
            {"timezone": "Europe/Moscow"},
            {
                "schedule": {"type": "crontab", "value": "0,15,30,45 9-17 * * 1-5"},
                "timezone": "Europe/Moscow",
            },
        ),
        (
            7200.0,
            {},
            {"schedule": {"type": "interval", "value": 2, "unit": "hour"}, "timezone": "UTC"},
        ),
        (
            timedelta(days=3),
            {},
            {"schedule": {"type": "interval", "value": 3, "unit": "day"}, "timezone": "UTC"},
        ),
        (90.0, {}, None),
        (10.0, {}, None),
    ],
)
def test_the_monitor_config_comes_from_the_entrys_rule_and_zone(
    schedule: object, options: dict[str, object], expected: object
) -> None:
    """Crontabs keep their fields and the entry's zone; intervals take the largest whole
    unit; what Sentry cannot express (90 s, under a minute) gets no monitor."""
    assert monitor_config(entry(schedule, **options)) == expected  # type: ignore[arg-type]


def test_three_replicas_send_one_in_progress_check_in_per_window(
    clock: FakeClock, queue: str, sentry: list[dict[str, object]]
) -> None:
    """Three schedulers on one store: each window has exactly one check-in, whose id and
    slug are on the window's message for Sentry's worker side."""
    app = make_app(
        queue,
        {
            "hourly": {"task": "t.run", "schedule": 3600.0},
            "quiet-hourly": {"task": "t.run", "schedule": 3600.0},
            "fast": {"task": "t.run", "schedule": 10.0},
        },
    )
    store = MemoryStore(clock=clock.now)
    replicas = [memory_scheduler(app, clock, store) for _ in range(3)]
    for _ in range(3 * 60 + 1):
        for replica in replicas:
            replica.tick()
        clock.advance(60)
    messages = [m for m in drain(app, queue) if m["safebeat_entry"] == "hourly"]
    assert len(messages) == 3
    assert [c["monitor_slug"] for c in sentry] == ["hourly"] * 3
    assert {c["status"] for c in sentry} == {"in_progress"}
    assert sorted(c["check_in_id"] for c in sentry) == sorted(
        uuid.UUID(m["id"]).hex for m in messages
    )
    assert sentry[0]["monitor_config"] == {
        "schedule": {"type": "interval", "value": 1, "unit": "hour"},
        "timezone": "UTC",
    }
    for message in messages:
        nested = message["headers"]
        assert nested["sentry-monitor-slug"] == "hourly"
        assert nested["sentry-monitor-check-in-id"] == uuid.UUID(message["id"]).hex
        assert float(nested["sentry-monitor-start-timestamp-s"]) > 0
        assert "sentry-trace" in nested


def test_a_republished_window_reports_to_the_same_check_in(
    clock: FakeClock, queue: str, sentry: list[dict[str, object]]
) -> None:
    """A claim a dead replica left unsent is published by another under the same check-in id."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 3600.0}}, safebeat_claim_timeout=30)
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    scheduler.tick()
    window = store.states("unit")["a"].anchor + timedelta(hours=1)
    clock.advance(3600)
    task_id = task_id_for("unit", "a", window)
    plan = TickPlan(claims=[NewClaim("a", window, task_id, "t.run")], advances={"a": window})
    store.tick("unit", ["a"], lambda now, s: plan, replica=Replica("dead-host", 1, "dead00"))
    run(scheduler, clock, 50)
    [message] = drain(app, queue)
    assert [c["check_in_id"] for c in sentry] == [uuid.UUID(task_id).hex]
    assert message["headers"]["sentry-monitor-check-in-id"] == uuid.UUID(task_id).hex


def test_without_monitor_beat_tasks_nothing_is_checked_in(clock: FakeClock, queue: str) -> None:
    """Sentry's Celery integration without monitor_beat_tasks: no check-in, no monitor header."""
    CheckIns.seen = []
    sentry_sdk.init(dsn=DSN, integrations=[CeleryIntegration()], transport=CheckIns)
    try:
        app = make_app(queue, {"hourly": {"task": "t.run", "schedule": 3600.0}})
        scheduler = memory_scheduler(app, clock)
        run(scheduler, clock, 3601, step=60)
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)
    [message] = drain(app, queue)
    assert CheckIns.seen == []
    assert "sentry-monitor-slug" not in message


def test_a_duplicate_delivery_sends_no_second_ok(sentry: list[dict[str, object]]) -> None:
    """On a real (embedded) worker with the worker hook, a window delivered twice runs once:
    Sentry's worker side sends one "ok", under the window's check-in id."""
    app = Celery("sentry", broker="memory://", set_as_current=False)
    app.conf.update(
        safebeat_url=f"memory://sentry-{uuid.uuid4().hex}",
        safebeat_namespace="unit",
        task_default_queue=f"q-{uuid.uuid4().hex[:8]}",
    )
    runs: list[str] = []

    @app.task(name="sentry.hourly", bind=True, shared=False)
    def hourly(self: Any) -> None:
        runs.append(self.request.id)

    safebeat.worker.install(app)
    store = store_of(app)[1]
    window = store.clock().replace(minute=0, second=0, microsecond=0)
    task_id = task_id_for("unit", "hourly", window)
    plan = TickPlan(claims=[NewClaim("hourly", window, task_id, "sentry.hourly")])
    result = store.tick("unit", [], lambda n, s: plan, replica=Replica("h", 1, "r00000"))
    assert result is not None
    [claim] = result.claimed
    raw: dict[str, Any] = {"task": "sentry.hourly", "schedule": 3600.0}
    hourly_entry = compile_entry("hourly", raw, app_timezone=timezone.utc, config=Config())
    with start_worker(app, pool="solo", perform_ping_check=False):
        with app.producer_or_acquire() as producer:
            for _ in range(2):  # a broker redelivery, or a re-publish of the same claim
                Publisher(app).send(producer, hourly_entry, claim)
        deadline = time.monotonic() + 20
        while store.history("unit", "hourly")[0].duplicates < 1:
            assert time.monotonic() < deadline, "the second delivery never arrived"
            time.sleep(0.05)
    assert runs == [task_id]
    check_in = uuid.UUID(task_id).hex
    assert [(c["status"], c["check_in_id"]) for c in sentry] == [
        ("in_progress", check_in),
        ("in_progress", check_in),
        ("ok", check_in),
    ]


def test_sentry_blocked_from_import_is_sentry_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that blocks sentry_sdk (`sys.modules["sentry_sdk"] = None`, as tools do to
    keep a module out) does not use Sentry: no import of it is attempted."""
    import sys

    from safebeat.contrib import sentry

    monkeypatch.setitem(sys.modules, "sentry_sdk", None)
    assert sentry.monitoring() is False
