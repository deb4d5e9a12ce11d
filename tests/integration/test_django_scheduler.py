"""safebeat.contrib.django.DatabaseScheduler on django-celery-beat's tables in real databases.

Each test runs on SQLite, PostgreSQL and MariaDB (where reachable): the rows live in that
database, the schedulers share a memory store on a controlled clock and publish to
kombu's memory broker, so every window can be counted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock
from tests import djangosite, runscope
from tests.acceptance.docrun import DOCS
from tests.docpages import Page

pytestmark = pytest.mark.django


TABLES = [
    f"django_celery_beat_{name}"
    for name in ("periodictask", "periodictasks", "intervalschedule", "crontabschedule")
]


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def beat_db(request: pytest.FixtureRequest) -> Iterator[str]:
    """django-celery-beat's tables in one real database, emptied after the test."""
    alias = djangosite.alias_for(request, request.param)
    djangosite.migrate(alias, "django_celery_beat")
    djangosite.BeatRouter.alias = alias
    yield alias
    from django.db import connections

    with connections[alias].cursor() as cursor:
        for table in TABLES:  # raw: the ORM would load a row with a bad time zone first
            cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
    djangosite.BeatRouter.alias = "default"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.now(timezone.utc).replace(microsecond=0))


@pytest.fixture
def app() -> Celery:
    queue = runscope.unique("q")
    app = Celery("djangotests", broker="memory://", set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        beat_schedule={},
        result_expires=None,
        safebeat_url="memory://unused",
        safebeat_namespace=f"ns-{uuid.uuid4().hex[:8]}",
    )

    @app.task(name="billing.charge", shared=False)
    def charge(*args: object, **kwargs: object) -> None:
        """A task beat can name."""

    return app


def scheduler(app: Celery, clock: FakeClock, store: MemoryStore) -> Any:
    from safebeat.contrib.django import DatabaseScheduler

    class Scheduler(DatabaseScheduler):  # from construction on: it reads the rows then
        marker_interval = 0.0

    Scheduler.clock = staticmethod(clock.now)
    return Scheduler(app, store=store, monotonic=clock.monotonic)


def run(beats: list[Any], clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        for beat in beats:
            beat.tick()
        clock.advance(step)


def drain(app: Celery, queue: str | None = None) -> list[dict[str, Any]]:
    """Every message on the queue (default: the app's), as its headers and properties."""
    messages = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        while (
            m := channel.basic_get(queue or app.conf.task_default_queue, no_ack=True)
        ) is not None:
            messages.append({**m.headers, "priority": m.properties.get("priority")})
    return messages


def interval_task(name: str, seconds: int, **fields: Any) -> Any:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
    return PeriodicTask.objects.create(name=name, task="billing.charge", interval=every, **fields)


def names_registered(store: MemoryStore) -> list[str]:
    """The names `store.register` is handed from now on, in order (a list that grows)."""
    registered: list[str] = []
    register = store.register

    def counted_register(namespace: str, definitions: Any, replica: Any) -> Any:
        registered.extend(d.name for d in definitions)
        return register(namespace, definitions, replica)

    store.register = counted_register  # type: ignore[method-assign]
    return registered


def test_two_replicas_send_each_window_of_each_row_once(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """Two DatabaseSchedulers on one store send every window of every row exactly once."""
    interval_task("every-2s", 2, kwargs=json.dumps({"plan": "pro"}), priority=3)
    interval_task("every-5s", 5, headers=json.dumps({"tenant": "acme"}))
    store = MemoryStore(clock=clock.now)
    beats = [scheduler(app, clock, store), scheduler(app, clock, store)]
    run(beats, clock, 20)
    messages = drain(app)
    sent = Counter((m["safebeat_entry"], m["safebeat_window"]) for m in messages)
    assert set(sent.values()) == {1}
    by_entry = Counter(entry for entry, _ in sent)
    assert 9 <= by_entry["every-2s"] <= 10
    assert 3 <= by_entry["every-5s"] <= 4
    five = next(m for m in messages if m["safebeat_entry"] == "every-5s")
    two = next(m for m in messages if m["safebeat_entry"] == "every-2s")
    assert (five["tenant"], five["periodic_task_name"]) == ("acme", "every-5s")
    assert two["priority"] == 3


def test_an_edit_is_picked_up_and_only_that_row_is_compiled_again(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """Saving one row (as the admin does) reschedules it; the other rows' entries are kept."""
    edited = interval_task("edited", 10)
    interval_task("untouched", 10)
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 1)
    untouched_before = beat.entries["untouched"]
    assert beat.entries["edited"].schedule_text == "every 10s"
    from django_celery_beat.models import IntervalSchedule

    edited.interval = IntervalSchedule.objects.create(every=3, period="seconds")
    edited.save()
    run([beat], clock, 1)
    assert beat.entries["edited"].schedule_text == "every 3s"
    assert beat.entries["untouched"] is untouched_before  # not compiled again


def test_a_row_added_edited_or_deleted_is_the_only_one_registered_and_planned(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """Among 20 rows, adding one, editing it and deleting it each register and plan that
    row only; the edited row is sent on its new schedule, the deleted one no more."""
    for i in range(20):
        interval_task(f"row-{i}", 3600)
    store = MemoryStore(clock=clock.now)
    beat = scheduler(app, clock, store)
    run([beat], clock, 1)
    registered = names_registered(store)
    loaded: list[str] = []
    tick = store.tick

    def counted_tick(namespace: str, names: Any, *args: Any, **kwargs: Any) -> Any:
        loaded.extend(names)
        return tick(namespace, names, *args, **kwargs)

    store.tick = counted_tick  # type: ignore[method-assign]
    added = interval_task("added", 2)
    run([beat], clock, 1)
    assert (registered, set(loaded)) == (["added"], {"added"})
    from django_celery_beat.models import IntervalSchedule

    registered.clear()
    added.interval = IntervalSchedule.objects.create(every=5, period="seconds")
    added.save()
    run([beat], clock, 1)
    assert registered == ["added"]
    drain(app)
    run([beat], clock, 10)
    windows = sorted(m["safebeat_window"] for m in drain(app) if m["safebeat_entry"] == "added")
    assert 2 <= len(windows) <= 3
    registered.clear()
    added.delete()
    run([beat], clock, 1)
    drain(app)
    run([beat], clock, 6)
    assert registered == []
    assert "added" not in beat.entries
    assert not [m for m in drain(app) if m["safebeat_entry"] == "added"]


def test_set_up_again_it_runs_the_rows_and_the_first_change_registers_that_row_alone(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """Set up again (Celery sets a scheduler up when it is built; an embedding may call
    `setup_schedule` once more), a replica keeps running the rows, not the settings alone:
    the first row added after that registers that row only, not every row again."""
    app.conf.beat_schedule = {"from-settings": {"task": "billing.charge", "schedule": 60.0}}
    for i in range(20):
        interval_task(f"row-{i}", 3600)
    store = MemoryStore(clock=clock.now)
    beat = scheduler(app, clock, store)
    run([beat], clock, 1)
    beat.setup_schedule()
    run([beat], clock, 1)
    assert set(beat.entries) == {"from-settings", *(f"row-{i}" for i in range(20))}
    registered = names_registered(store)
    interval_task("added", 2)
    run([beat], clock, 1)
    assert registered == ["added"]
    beat.close()


def test_at_start_it_compiles_the_settings_and_reads_the_rows_once(
    beat_db: str, app: Celery, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set up, the scheduler gives beat the settings' entries and the rows' at once: the
    settings are compiled once, the rows read once, and every entry registered once."""
    from safebeat.contrib.django import DatabaseScheduler
    from safebeat.contrib.django.source import PeriodicTaskSource

    app.conf.beat_schedule = {"from-settings": {"task": "billing.charge", "schedule": 60.0}}
    for i in range(3):
        interval_task(f"row-{i}", 3600)
    calls: Counter[str] = Counter()
    schedule_source, load = DatabaseScheduler.schedule_source, PeriodicTaskSource.load

    def counted_source(self: Any) -> Any:  # what each compile of the settings reads
        calls["settings compiled"] += 1
        return schedule_source(self)

    def counted_load(self: PeriodicTaskSource) -> Any:
        calls["rows read"] += 1
        return load(self)

    monkeypatch.setattr(DatabaseScheduler, "schedule_source", counted_source)
    monkeypatch.setattr(PeriodicTaskSource, "load", counted_load)
    store = MemoryStore(clock=clock.now)
    registered = names_registered(store)
    beat = scheduler(app, clock, store)
    run([beat], clock, 1)
    assert calls == {"settings compiled": 1, "rows read": 1}
    assert sorted(registered) == ["from-settings", "row-0", "row-1", "row-2"]
    beat.close()


def test_a_schedule_many_rows_share_edited_compiles_those_rows_from_one_read(
    beat_db: str, app: Celery, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More changed rows than a load reads by primary key: it reads every row once, and
    compiles again only the changed ones; a row deleted meanwhile is gone."""
    from django_celery_beat.models import IntervalSchedule

    from safebeat.contrib.django import source

    monkeypatch.setattr(source, "FETCH_ALL", 2)
    monkeypatch.setattr(source, "FETCH_CHUNK", 2)  # several IN lists for the schedules
    shared = IntervalSchedule.objects.create(every=10, period="seconds")
    for i in range(5):
        interval_task(f"shared-{i}", 10)
    rows = {i: interval_task(f"own-{i}", 7 + i) for i in range(3)}
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 1)
    assert beat.entries["shared-0"].schedule_text == "every 10s"
    kept = beat.entries["own-0"]
    shared.every = 4
    shared.save()  # moves the marker: five rows changed, by their schedule's values
    rows[1].delete()
    run([beat], clock, 1)
    assert {beat.entries[f"shared-{i}"].schedule_text for i in range(5)} == {"every 4s"}
    assert beat.entries["own-0"] is kept
    assert "own-1" not in beat.entries
    assert beat.entries["own-2"].schedule_text == "every 9s"


def test_rows_of_one_read_compile_to_the_entries_each_compiles_to_alone(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """Rows sharing schedules and headers share their compiled parts (`RowCache`); each
    entry is still the one its row compiles to alone, digest included."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    from safebeat.config import config_from_app
    from safebeat.contrib.django.rows import compile_row, row_digest
    from safebeat.contrib.django.source import PeriodicTaskSource
    from safebeat.errors import EntryError

    tokyo = CrontabSchedule.objects.create(minute="5", hour="*", timezone="Asia/Tokyo")
    policy = json.dumps({"safebeat": {"misfire": "skip"}, "tenant": "acme"})
    for i in range(3):
        PeriodicTask.objects.create(
            name=f"tokyo-{i}", task="billing.charge", crontab=tokyo, args=f"[{i}]", headers=policy
        )
        interval_task(f"hourly-{i}", 3600, kwargs=json.dumps({"n": i}), queue="q" if i else "")
    interval_task("late", 60, start_time=clock.now() + timedelta(hours=1))
    # Rows of the tokyo rows' shape: only their args and kwargs differ (`row_shapes`).
    own = [
        ("", ""),
        ('[1.5, "\u00e9", null, [true, 1e400]]', '{"b": {"y": 1, "x": [2]}, "a": "\u00e9"}'),
        ('[{"z": 1, "a": 2}]', "{}"),
        ("[1", "{}"),  # an error of its own, as alone
        ('{"not": "a list"}', "{}"),
    ]
    for i, (args, kwargs) in enumerate(own):
        PeriodicTask.objects.create(
            name=f"shaped-{i}",
            task="billing.charge",
            crontab=tokyo,
            args=args,
            kwargs=kwargs,
            headers=policy,
        )
    # A name of its own that is no name (the admin refuses it; a script may save it).
    PeriodicTask.objects.create(name="", task="billing.charge", crontab=tokyo, headers=policy)
    config = config_from_app(app)
    source = PeriodicTaskSource(app, config, clock.now)
    loaded = source.load()
    compiled = {row.name: row.entry for row in loaded if row.entry is not None}
    errors = {row.name: str(row.error) for row in loaded if row.error is not None}
    assert len(compiled) == 10
    assert set(errors) == {"shaped-3", "shaped-4", ""}
    from django.db.models import F, TextField
    from django.db.models.functions import Cast

    from safebeat.contrib.django.rows import ROW_FIELDS

    for values in PeriodicTask.objects.annotate(
        crontab_tz=Cast(F("crontab__timezone"), TextField())
    ).values(*ROW_FIELDS):
        if values["name"] in errors:
            with pytest.raises(EntryError) as refused:
                compile_row(values, app=app, config=config, now=clock.now())
            assert errors[values["name"]] == str(refused.value)
            continue
        alone = compile_row(values, app=app, config=config, now=clock.now())
        assert compiled[values["name"]] == alone
    assert compiled["tokyo-0"].rule is compiled["tokyo-2"].rule
    assert compiled["shaped-1"].options is compiled["tokyo-0"].options  # one shape's
    not_before = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    for when, one_off in ((None, False), (not_before, True)):
        text = 'crontab 5 * * * * in Asia/Tokyo "é'
        payload = [compiled["tokyo-0"].digest, text, {"not_before": str(when), "one_off": one_off}]
        written = json.dumps(payload, sort_keys=True).encode()
        expected = hashlib.sha256(written).hexdigest()[:16]
        assert row_digest(compiled["tokyo-0"].digest, text, when, one_off) == expected


def test_runs_are_written_back_without_overwriting_admin_edits(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """After a window is sent, only last_run_at and total_run_count change in the row."""
    from django_celery_beat.models import PeriodicTask, PeriodicTasks

    task = interval_task("daily-charge", 2)
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 0.5)
    # An admin edit the scheduler has not loaded yet:
    PeriodicTask.objects.filter(pk=task.pk).update(description="edited in the admin")
    marker = PeriodicTasks.last_change()
    run([beat], clock, 4.5)
    row = PeriodicTask.objects.get(pk=task.pk)
    sent = [m for m in drain(app) if m["safebeat_entry"] == "daily-charge"]
    assert row.total_run_count == len(sent) == 2
    assert row.last_run_at == max(datetime.fromisoformat(m["safebeat_window"]) for m in sent)
    assert row.description == "edited in the admin"
    assert PeriodicTasks.last_change() == marker  # write-backs make no replica reload


def test_bad_rows_are_reported_by_name_and_the_others_run(
    beat_db: str, app: Celery, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Invalid JSON, an unknown task, a crontab that never matches or an unknown time zone
    leave that row out, with its name in the error; the good row keeps running."""
    from django.db import connections
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    interval_task("good", 2)
    interval_task("bad-json", 2, args="[1, 2")
    interval_task("bad-task", 2).__class__.objects.filter(name="bad-task").update(
        task="billing.chrage"
    )
    never = CrontabSchedule.objects.create(
        minute="0", hour="0", day_of_month="31", month_of_year="2"
    )
    PeriodicTask.objects.create(name="bad-crontab", task="billing.charge", crontab=never)
    mars = CrontabSchedule.objects.create(minute="*", timezone="UTC")
    with connections[beat_db].cursor() as cursor:  # the field itself refuses to store it
        cursor.execute(
            "UPDATE django_celery_beat_crontabschedule SET timezone = %s WHERE id = %s",
            ["Mars/Olympus_Mons", mars.pk],
        )
    PeriodicTask.objects.create(name="bad-zone", task="billing.charge", crontab=mars)
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    with caplog.at_level(logging.ERROR, logger="safebeat.beat.scheduler"):
        run([beat], clock, 4)
    problems = {name: str(error) for name, error in beat.broken_entries.items()}
    assert set(problems) == {"bad-json", "bad-task", "bad-crontab", "bad-zone"}
    assert "args is not valid JSON" in problems["bad-json"]
    assert "unknown task 'billing.chrage'" in problems["bad-task"]
    assert "never" in problems["bad-crontab"]
    assert "Mars/Olympus_Mons" in problems["bad-zone"]
    assert all(f"'{name}'" in caplog.text for name in problems)
    assert {m["safebeat_entry"] for m in drain(app)} == {"good"}


def test_a_row_that_fails_in_an_unforeseen_way_is_reported_and_the_others_run(
    beat_db: str, app: Celery, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any exception while compiling one row makes that row an EntryError, not a dead beat."""
    from safebeat.contrib.django import source

    real_compile_row = source.compile_row

    def compile_row(values: dict[str, Any], **kwargs: Any) -> Any:
        if values["name"] == "surprise":
            raise RuntimeError("a bug\nover two lines")
        return real_compile_row(values, **kwargs)

    monkeypatch.setattr(source, "compile_row", compile_row)
    interval_task("good", 2)
    interval_task("surprise", 2)
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 4)
    problem = str(beat.broken_entries["surprise"])
    assert "RuntimeError: a bug over two lines" in problem
    assert set(beat.broken_entries) == {"surprise"}
    assert {m["safebeat_entry"] for m in drain(app)} == {"good"}


def test_one_off_start_time_and_expires_are_honoured(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """A one_off row is sent once and disabled; no window before start_time or after expires."""
    from django_celery_beat.models import PeriodicTask

    now = clock.now()
    interval_task("once", 1, one_off=True)
    interval_task("later", 1, start_time=now + timedelta(seconds=3, microseconds=500000))
    interval_task("expiring", 1, expires=now + timedelta(seconds=3))
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 6)
    windows: dict[str, list[datetime]] = {}
    for m in drain(app):
        windows.setdefault(m["safebeat_entry"], []).append(
            datetime.fromisoformat(m["safebeat_window"])
        )
    assert len(windows["once"]) == 1
    assert PeriodicTask.objects.get(name="once").enabled is False
    assert min(windows["later"]) == now + timedelta(seconds=3, microseconds=500000)
    assert "expiring" not in beat.entries
    assert max(windows["expiring"]) <= now + timedelta(seconds=3)


def test_an_expired_row_is_disabled_as_django_celery_beat_does(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """django-celery-beat's scheduler turns off a row whose `expires` passed (the admin shows
    it off); so does safebeat's, leaving a row whose `expires` was moved on untouched."""
    from django_celery_beat.models import PeriodicTask

    now = clock.now()
    interval_task("expiring", 1, expires=now + timedelta(seconds=3))
    interval_task("lasting", 1, expires=now + timedelta(days=1))
    beats = [
        scheduler(app, clock, store := MemoryStore(clock=clock.now)),
        scheduler(app, clock, store),
    ]
    run(beats, clock, 2)
    assert PeriodicTask.objects.get(name="expiring").enabled is True
    run(beats, clock, 3)
    assert PeriodicTask.objects.get(name="expiring").enabled is False
    assert PeriodicTask.objects.get(name="lasting").enabled is True
    assert all("expiring" not in beat.entries for beat in beats)


def test_a_clocked_one_off_set_for_now_is_sent_once(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """A clocked one_off row whose time passed a moment before beat saw it (set for "now" in
    the admin) is sent once, at its window, and disabled, as django-celery-beat does."""
    from django_celery_beat.models import ClockedSchedule, PeriodicTask

    at = clock.now() - timedelta(seconds=2)
    moment = ClockedSchedule.objects.create(clocked_time=at)
    PeriodicTask.objects.create(
        name="now-once", task="billing.charge", clocked=moment, one_off=True
    )
    clock.advance(1)  # beat starts after the row was saved
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 4)
    sent = [m for m in drain(app) if m["safebeat_entry"] == "now-once"]
    assert [datetime.fromisoformat(m["safebeat_window"]) for m in sent] == [at]
    assert PeriodicTask.objects.get(name="now-once").enabled is False


def test_a_row_wins_over_a_beat_schedule_entry_of_its_name(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """A setting and a row named alike: the row (the admin's version) is what runs."""
    app.conf.beat_schedule = {
        "report": {"task": "billing.charge", "schedule": 60.0},
        "from-settings": {"task": "billing.charge", "schedule": 60.0},
    }
    interval_task("report", 7, headers=json.dumps({"safebeat": {"misfire": "skip"}}))
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 1)
    assert beat.entries["report"].schedule_text == "every 7s"
    assert beat.entries["report"].policy.misfire.value == "skip"
    assert beat.entries["from-settings"].schedule_text == "every 60s"


def test_a_replica_registers_the_rows_from_its_start_not_the_settings_they_shadow(
    beat_db: str, app: Celery, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A row shadowing a setting of its name is what a starting replica registers first:
    no replica registers the setting's definition only to replace it at its first tick,
    so a restart warns of no definition that differs (it warned of every shadowed one)."""
    app.conf.beat_schedule = {"report": {"task": "billing.charge", "schedule": 60.0}}
    interval_task("report", 7)
    store = MemoryStore(clock=clock.now)
    with caplog.at_level(logging.WARNING, logger="safebeat"):
        for _ in range(2):  # a start, then a restart
            beat = scheduler(app, clock, store)
            run([beat], clock, 1)
            beat.close()
    assert store.states(app.conf.safebeat_namespace)["report"].schedule == "every 7s"
    assert not [r for r in caplog.records if "differs from the one registered" in r.getMessage()]


def test_a_read_of_the_rows_that_fails_at_the_start_is_retried_before_registering(
    beat_db: str, app: Celery, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows' first read fails after the change marker was read: the next tick reads
    them again (the marker has not moved since), and the replica registers the row, not
    the setting it shadows, nor the settings alone until a row next changes."""
    from django.db import DatabaseError

    from safebeat.contrib.django.source import PeriodicTaskSource

    app.conf.beat_schedule = {"report": {"task": "billing.charge", "schedule": 60.0}}
    interval_task("report", 7)
    compile_rows = PeriodicTaskSource._compile
    failures = [DatabaseError("connection lost")]

    def failing_compile(self: PeriodicTaskSource, *args: Any, **kwargs: Any) -> None:
        if failures:
            raise failures.pop()
        compile_rows(self, *args, **kwargs)

    monkeypatch.setattr(PeriodicTaskSource, "_compile", failing_compile)
    store = MemoryStore(clock=clock.now)
    beat = scheduler(app, clock, store)
    run([beat], clock, 5)
    assert not failures
    assert beat.entries["report"].schedule_text == "every 7s"
    assert store.states(app.conf.safebeat_namespace)["report"].schedule == "every 7s"
    beat.close()


def test_a_row_copied_from_a_custom_schedule_class_does_not_run_it_as_a_plain_one(
    beat_db: str, app: Celery, clock: FakeClock
) -> None:
    """django-celery-beat copies a settings entry into a row as a plain schedule, losing a
    custom class's `is_due`; the row would win, so the entry is refused by name instead."""
    from celery.schedules import crontab, schedstate

    class workdays(crontab):
        def is_due(self, last_run_at: datetime) -> Any:
            due, next_check = super().is_due(last_run_at)
            return schedstate(due and self.now().weekday() < 5, next_check)

    app.conf.beat_schedule = {
        "report": {"task": "billing.charge", "schedule": workdays(minute=0, hour=9)},
        "alone": {"task": "billing.charge", "schedule": workdays(minute=0, hour=9)},
    }
    interval_task("report", 60)
    beat = scheduler(app, clock, MemoryStore(clock=clock.now))
    run([beat], clock, 1)
    assert "report" not in beat.entries
    problem = str(beat.broken_entries["report"])
    assert "workdays" in problem
    assert "delete or rename the row" in problem
    assert "workdays decides" in beat.entries["alone"].schedule_text


def test_the_migration_guides_copies_are_the_settings_and_celerys_cleanup(
    beat_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step 6 of docs/migrating-from-django-celery-beat.md, run as written (its delete
    uncommented): it lists and retires the rows django-celery-beat copied from the
    settings and made for `celery.backend_cleanup`, and leaves the admin's own rows."""
    from django.test import override_settings
    from django_celery_beat.models import PeriodicTask

    step = Page(DOCS / "migrating-from-django-celery-beat.md").block("retire-copies").text
    for name in ("report", "celery.backend_cleanup", "from-the-admin"):
        interval_task(name, 60)
    schedule = {"report": {"task": "billing.charge", "schedule": 60.0}}
    with override_settings(CELERY_BEAT_SCHEDULE=schedule):
        exec(step.replace("# copies.delete()", "copies.delete()"), {})  # noqa: S102
    printed = capsys.readouterr().out
    assert sorted(eval(printed)) == ["celery.backend_cleanup", "report"]  # noqa: S307
    assert list(PeriodicTask.objects.values_list("name", flat=True)) == ["from-the-admin"]
