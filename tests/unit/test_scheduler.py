"""safebeat.Scheduler, tick by tick on a controlled clock, publishing to kombu's memory broker."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab

from safebeat import Scheduler
from safebeat.beat.dispatch import retry_policy
from safebeat.errors import ConfigError, StoreUnavailable
from safebeat.identity import format_window, task_id_for
from safebeat.records import Pause
from safebeat.stores.memory import MemoryStore
from safebeat.stores.protocols import NewClaim, Status, TickPlan
from safebeat.stores.ticking import Heartbeat
from safebeat.testing import FakeClock, memory_scheduler

START = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def make_app(queue: str, schedule: dict[str, Any], **conf: Any) -> Celery:
    app = Celery("unit", broker="memory://", set_as_current=False)
    # The scheduler named, as a project running safebeat names it: left at Celery's default,
    # the app's entries would include django-celery-beat's rows whenever an earlier test in
    # this process configured Django with django_celery_beat installed.
    settings = {
        "safebeat_url": "memory://unit-tests-unused",
        "result_expires": None,
        "beat_scheduler": "safebeat.Scheduler",
        **conf,
    }
    app.conf.update(task_default_queue=queue, beat_schedule=schedule, **settings)
    return app


def drain(app: Celery, queue: str) -> list[dict[str, Any]]:
    """Every message on `queue`, as its headers (consumed)."""
    messages = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            messages.append(message.headers)
    return messages


def windows_sent(messages: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((m["safebeat_entry"], m["safebeat_window"]) for m in messages)


def run(scheduler: Scheduler, clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    """Tick like celery's Service loop would, moving the fake clock in small steps."""
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        scheduler.tick()
        clock.advance(step)


def test_every_due_entry_is_sent_in_one_tick(clock: FakeClock, queue: str) -> None:
    """Ten entries due at the same instant are all published by a single tick."""
    app = make_app(queue, {f"e{i}": {"task": "t.run", "schedule": 10.0} for i in range(10)})
    scheduler = memory_scheduler(app, clock)
    scheduler.tick()
    clock.advance(10)
    scheduler.tick()
    sent = windows_sent(drain(app, queue))
    assert len(sent) == 10
    assert set(sent.values()) == {1}
    assert {w for _, w in sent} == {"2026-03-01T12:00:10Z"}


def test_celerys_schedule_is_a_read_only_view_of_the_entries(clock: FakeClock, queue: str) -> None:
    """Celery's `schedule` shows the compiled entries without a copy of them."""
    app = make_app(queue, {f"e{i}": {"task": "t.run", "schedule": 10.0} for i in range(3)})
    scheduler = memory_scheduler(app, clock)
    assert scheduler.schedule == scheduler.entries
    assert sorted(scheduler.schedule) == ["e0", "e1", "e2"]
    with pytest.raises(TypeError):
        scheduler.schedule["e3"] = scheduler.entries["e0"]


def test_replicas_sharing_a_store_send_each_window_once(clock: FakeClock, queue: str) -> None:
    """Three schedulers on one store, ticking in turn, send every window exactly once."""
    app = make_app(
        queue,
        {"fast": {"task": "t.run", "schedule": 1.0}, "slow": {"task": "t.run", "schedule": 3.0}},
    )
    store = MemoryStore(clock=clock.now)
    replicas = [memory_scheduler(app, clock, store) for _ in range(3)]
    for _ in range(60):
        for replica in replicas:
            replica.tick()
        clock.advance(0.25)
    sent = windows_sent(drain(app, queue))
    assert max(sent.values()) == 1
    fast = sorted(w for e, w in sent if e == "fast")
    assert fast == [f"2026-03-01T12:00:{s:02d}Z" for s in range(1, 16)]
    assert len([1 for e, _ in sent if e == "slow"]) == 5


def test_message_carries_window_headers_and_a_stable_task_id(clock: FakeClock, queue: str) -> None:
    """The message has safebeat's headers, the uuid5 task id, the entry's options and headers."""
    app = make_app(
        queue,
        {
            "report": {
                "task": "reports.weekly",
                "schedule": 5.0,
                "args": (1, 2),
                "kwargs": {"x": 3},
                "options": {
                    "priority": 7,
                    "headers": {"tenant": "acme"},
                    "safebeat": {"misfire": "skip"},
                },
            }
        },
    )
    scheduler = memory_scheduler(app, clock)
    scheduler.tick()
    clock.advance(5)
    scheduler.tick()
    [headers] = drain(app, queue)
    window = datetime(2026, 3, 1, 12, 0, 5, tzinfo=timezone.utc)
    assert headers["safebeat_entry"] == "report"
    assert headers["periodic_task_name"] == "report"
    assert headers["safebeat_window"] == "2026-03-01T12:00:05Z"
    assert headers["id"] == task_id_for("unit", "report", window)
    assert headers["task"] == "reports.weekly"
    assert headers["tenant"] == "acme"
    assert "safebeat" not in headers
    assert headers["argsrepr"] == "(1, 2)" or headers["argsrepr"] == "[1, 2]"


def test_lazy_construction_touches_no_store(queue: str) -> None:
    """The banner's lazy scheduler parses settings but opens and queries nothing."""

    class Untouchable(MemoryStore):
        def __getattribute__(self, name: str) -> Any:
            if not name.startswith("_") and name != "display_url":
                raise AssertionError(f"lazy scheduler used store.{name}")
            return super().__getattribute__(name)

    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    scheduler = Scheduler(app, lazy=True, store=Untouchable())
    assert "safebeat ->" in scheduler.info
    unreachable = make_app(queue, {}, safebeat_url="postgresql://u:pw@127.0.0.1:1/x")
    assert "u:***@127.0.0.1:1" in Scheduler(unreachable, lazy=True).info


def test_banner_names_store_namespace_and_replica_without_password(queue: str) -> None:
    """The banner line shows the redacted store URL, the namespace and this replica's id."""
    app = make_app(
        queue, {}, safebeat_url="postgresql://app:s3cr3t@db:5432/app", safebeat_namespace="billing"
    )
    info = Scheduler(app, lazy=True).info
    assert "s3cr3t" not in info
    assert "postgresql://app:***@db:5432/app" in info
    assert "namespace 'billing'" in info
    assert ":" in info.rsplit("replica ", 1)[1]


def test_bad_entries_are_reported_and_the_rest_run(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad schedule, time zone or policy is logged by name; the good entry still fires."""
    app = make_app(
        queue,
        {
            "good": {"task": "t.run", "schedule": 2.0},
            "bad-schedule": {"task": "t.run", "schedule": "every day"},
            "bad-zone": {
                "task": "t.run",
                "schedule": crontab(),
                "options": {"safebeat": {"timezone": "Mars/Olympus"}},
            },
            "bad-policy": {
                "task": "t.run",
                "schedule": 1,
                "options": {"safebeat": {"misfire": "maybe"}},
            },
        },
    )
    with caplog.at_level(logging.ERROR, "safebeat"):
        scheduler = memory_scheduler(app, clock)
    assert set(scheduler.entries) == {"good"}
    assert set(scheduler.broken_entries) == {"bad-schedule", "bad-zone", "bad-policy"}
    text = caplog.text
    assert "'bad-schedule'" in text
    assert "'Mars/Olympus'" in text
    assert "'maybe'" in text
    run(scheduler, clock, 4.2)
    assert {e for e, _ in windows_sent(drain(app, queue))} == {"good"}


def test_a_broken_definition_is_served_as_broken_until_it_is_fixed(
    clock: FakeClock, queue: str
) -> None:
    """safebeat_entry_broken is 1 for each entry whose definition does not load, from the
    start (a restarted beat serves it again at once) and for as long as it is broken; the
    fixed entry's series goes."""
    schedule = {
        "good": {"task": "t.run", "schedule": 2.0},
        "bad-schedule": {"task": "t.run", "schedule": "every day"},
    }
    scheduler = memory_scheduler(make_app(queue, schedule), clock)
    metrics = scheduler.engine.metrics
    metrics.serve(0, address="127.0.0.1")

    def broken() -> dict[str, float]:
        return {
            sample.labels["entry"]: sample.value
            for family in metrics.registry.collect()
            if family.name == "safebeat_entry_broken"
            for sample in family.samples
        }

    assert broken() == {"bad-schedule": 1.0}
    run(scheduler, clock, 10)
    assert broken() == {"bad-schedule": 1.0}
    fixed = scheduler.engine.entries | {}
    scheduler.engine.use_entries(fixed, {})
    assert broken() == {}


def test_unknown_setting_stops_startup_naming_it(queue: str) -> None:
    """A misspelt safebeat setting is a startup error that names it and suggests the right one."""
    app = make_app(queue, {}, safebeat_claim_timout=10)
    with pytest.raises(ConfigError, match=r"safebeat_claim_timout.*safebeat_claim_timeout"):
        Scheduler(app, lazy=True)


class FlakyStore(MemoryStore):
    """A memory store whose every call fails while `down` is set (the store's outage)."""

    down = False
    error: type[Exception] = StoreUnavailable

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if not name.startswith("_") and callable(attr) and object.__getattribute__(self, "down"):

            def fail(*args: Any, **kwargs: Any) -> Any:
                raise object.__getattribute__(self, "error")("connection refused")

            return fail
        return attr


def test_store_down_at_start_claims_nothing_then_recovers(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the store unreachable beat stays up and sends nothing; it resumes on its own."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    store = FlakyStore(clock=clock.now)
    store.down = True
    with caplog.at_level(logging.WARNING, "safebeat"):
        scheduler = memory_scheduler(app, clock, store)
        delays = []
        for _ in range(20):
            delays.append(scheduler.tick())
            clock.advance(1)
    assert drain(app, queue) == []
    assert scheduler.metrics.totals.store_errors >= 3
    assert "retrying in" in caplog.text
    assert max(delays) <= scheduler.max_interval
    store.down = False
    run(scheduler, clock, 40, step=1)
    sent = windows_sent(drain(app, queue))
    assert sent
    assert max(sent.values()) == 1


def test_only_ticks_that_reach_the_store_count_as_succeeded(clock: FakeClock, queue: str) -> None:
    """During an outage ticks go on but none succeeds: what "no successful tick" alerts on."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    store = FlakyStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 3)
    succeeded = scheduler.metrics.totals.ticks_succeeded
    assert succeeded >= 3
    store.down = True
    ticks = scheduler.metrics.totals.ticks
    run(scheduler, clock, 30)
    assert scheduler.metrics.totals.ticks > ticks
    assert scheduler.metrics.totals.ticks_succeeded == succeeded
    store.down = False
    run(scheduler, clock, 40)
    assert scheduler.metrics.totals.ticks_succeeded > succeeded


def test_store_lost_mid_run_sends_nothing_unclaimed(clock: FakeClock, queue: str) -> None:
    """Windows due while the store is down are not sent blind; after it returns, policy applies."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    store = FlakyStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 3)
    before = windows_sent(drain(app, queue))
    store.down = True
    run(scheduler, clock, 10)
    assert drain(app, queue) == []
    store.down = False
    run(scheduler, clock, 35, step=1)
    after = windows_sent(drain(app, queue))
    assert max(after.values()) == 1
    assert not set(before) & set(after)
    skipped = [r for r in store.history("unit", "a") if r.status is Status.SKIPPED]
    assert skipped
    assert skipped[0].reason == "missed"


def test_unexpected_errors_never_escape_tick(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Even a programming error inside the store is logged with its traceback and retried
    after a backoff, not raised; once it is gone the next tick sends the due window."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    store = FlakyStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    store.error = RuntimeError
    store.down = True
    clock.advance(2)
    with caplog.at_level(logging.ERROR, "safebeat"):
        delay = scheduler.tick()
    assert delay > 0
    [record] = [r for r in caplog.records if "unexpected error in tick" in r.getMessage()]
    assert record.exc_info is not None
    assert record.exc_info[0] is RuntimeError
    assert drain(app, queue) == []
    store.down = False
    clock.advance(delay + 0.001)  # the clock keeps microseconds
    scheduler.tick()
    [headers] = drain(app, queue)
    assert headers["safebeat_entry"] == "a"


def test_unpublishable_message_is_recorded_failed_and_others_sent(
    clock: FakeClock, queue: str
) -> None:
    """A message kombu cannot encode fails alone, recorded with its error; others are sent."""
    app = make_app(
        queue,
        {
            "ok": {"task": "t.run", "schedule": 1.0},
            "broken": {"task": "t.run", "schedule": 1.0, "kwargs": {"when": object()}},
        },
    )
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 2.6)
    assert {e for e, _ in windows_sent(drain(app, queue))} == {"ok"}
    rows = store.history("unit", "broken")
    assert rows
    assert all(r.status is Status.FAILED for r in rows)
    assert "serializ" in (rows[0].error or "").lower() or "encode" in (rows[0].error or "").lower()


def test_misfire_latest_sends_one_window_after_an_outage(clock: FakeClock, queue: str) -> None:
    """After an outage of every replica, `latest` sends the newest missed window once."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 60.0}})
    store = MemoryStore(clock=clock.now)
    run(memory_scheduler(app, clock, store), clock, 61, step=1)
    assert len(drain(app, queue)) == 1
    clock.advance(600)  # every replica down for ten minutes
    restarted = memory_scheduler(app, clock, store)
    restarted.tick()
    [headers] = drain(app, queue)
    assert headers["safebeat_window"] == "2026-03-01T12:11:00Z"
    skipped = [r for r in store.history("unit", "a") if r.status is Status.SKIPPED]
    assert [(r.skipped_count, r.reason) for r in skipped] == [(9, "missed")]


def test_misfire_all_catches_up_within_the_limit(clock: FakeClock, queue: str) -> None:
    """`all` sends every missed window, the newest catchup_limit of them."""
    app = make_app(
        queue,
        {
            "a": {
                "task": "t.run",
                "schedule": 60.0,
                "options": {"safebeat": {"misfire": "all", "catchup_limit": 5}},
            }
        },
    )
    store = MemoryStore(clock=clock.now)
    run(memory_scheduler(app, clock, store), clock, 61, step=1)
    drain(app, queue)
    clock.advance(600)
    memory_scheduler(app, clock, store).tick()
    windows = sorted(h["safebeat_window"] for h in drain(app, queue))
    assert windows == [f"2026-03-01T12:{m:02d}:00Z" for m in range(7, 12)]


def test_restart_keeps_interval_windows_on_their_grid(clock: FakeClock, queue: str) -> None:
    """A restarted replica continues the same windows: nothing fires early, late or twice."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 7.0}})
    store = MemoryStore(clock=clock.now)
    run(memory_scheduler(app, clock, store), clock, 15.3)
    run(memory_scheduler(app, clock, store), clock, 15)
    windows = sorted(h["safebeat_window"] for h in drain(app, queue))
    assert windows == [
        "2026-03-01T12:00:07Z",
        "2026-03-01T12:00:14Z",
        "2026-03-01T12:00:21Z",
        "2026-03-01T12:00:28Z",
    ]


def test_stale_claim_is_republished_with_the_same_task_id(clock: FakeClock, queue: str) -> None:
    """A claim left unsent by a dead replica is published by another after claim_timeout."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 3600.0}}, safebeat_claim_timeout=30)
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    scheduler.tick()
    window = store.states("unit")["a"].anchor + timedelta(hours=1)
    clock.advance(3600)
    from safebeat.identity import Replica

    dead = Replica("dead-host", 1, "dead00")
    store.tick(
        "unit",
        ["a"],
        lambda now, s: TickPlan(
            claims=[NewClaim("a", window, task_id_for("unit", "a", window), "t.run")],
            advances={"a": window},
        ),
        replica=dead,
    )
    run(scheduler, clock, 20)
    assert drain(app, queue) == []
    run(scheduler, clock, 30)
    [headers] = drain(app, queue)
    assert headers["id"] == task_id_for("unit", "a", window)
    [row] = store.history("unit", "a")
    assert (row.status, row.attempts, row.replica) == (Status.SENT, 2, scheduler.replica.id)


def test_a_stale_claim_behind_pages_of_claims_nobody_defines_is_republished_soon(
    clock: FakeClock, queue: str
) -> None:
    """Take-over passes read a page each; while they read full pages of claims they leave
    (of an entry no replica defines), the next comes within a second, not half a claim
    timeout later: the claim of an entry beat defines behind them goes out seconds late."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 3600.0}}, safebeat_claim_timeout=30)
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    scheduler.reclaim_page = 5
    scheduler.tick()
    anchor = store.states("unit")["a"].anchor
    from safebeat.identity import Replica

    dead = Replica("dead-host", 1, "dead00")
    gone = [anchor + timedelta(seconds=n) for n in range(1, 13)]
    window = anchor + timedelta(hours=1)
    for entry, windows in (("gone", gone), ("a", [window])):
        store.tick(
            "unit",
            [],
            lambda now, s, e=entry, w=windows: TickPlan(
                claims=[NewClaim(e, x, task_id_for("unit", e, x), "t.run") for x in w]
            ),
            replica=dead,
        )
        clock.advance(1)
    clock.advance(30)  # every claim is stale now, "a"'s the newest
    run(scheduler, clock, 3)
    [headers] = drain(app, queue)
    assert headers["id"] == task_id_for("unit", "a", window)
    assert all(r.attempts == 1 for r in store.history("unit", "gone"))


def test_sleep_is_until_the_next_window_capped(clock: FakeClock, queue: str) -> None:
    """tick() returns the time to the next window, never more than max_interval, nor more
    than the time to the next look at the entries added at run time."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 2.0}})
    scheduler = memory_scheduler(app, clock)
    scheduler.runtime_interval = 60.0
    scheduler.tick()
    clock.advance(1)
    scheduler.tick()  # the look at the entries added at run time; the next one is in 60 s
    assert scheduler.tick() == pytest.approx(2 - 1.25, abs=0.01)
    # A lease long enough that the take-over pass (every fifth of it) is not what wakes it.
    slow = make_app(
        queue, {"a": {"task": "t.run", "schedule": 3600.0}}, safebeat_execution_lease=60
    )
    idle = memory_scheduler(slow, clock)
    assert idle.tick() == idle.runtime_interval
    idle.runtime_interval = 60.0
    clock.advance(1)
    assert idle.tick() == idle.max_interval


def test_changed_definition_is_reported(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica with a different definition of an entry (rolling deploy) says so in the log."""
    store = MemoryStore(clock=clock.now)
    memory_scheduler(make_app(queue, {"a": {"task": "t.run", "schedule": 5.0}}), clock, store)
    with caplog.at_level(logging.WARNING, "safebeat"):
        memory_scheduler(
            make_app(queue, {"a": {"task": "t.run", "schedule": 5.0, "args": [1]}}), clock, store
        )
    assert "entry 'a'" in caplog.text
    assert "rolling deploy" in caplog.text


def test_a_restart_registers_only_what_changed_and_reads_no_state(
    clock: FakeClock, queue: str
) -> None:
    """Registering is handed the definitions a slice at a time as the store reads them;
    a restart with one entry changed and one added reports only the changed one, and
    writes the new definition before the first tick claims anything."""
    store = MemoryStore(clock=clock.now)
    schedule = {f"e{i}": {"task": "t.run", "schedule": 5.0, "args": [i]} for i in range(3)}
    memory_scheduler(make_app(queue, schedule), clock, store)
    seen: list[Any] = []
    register = store.register

    def recorded(namespace: str, definitions: Any, replica: Any) -> Any:
        seen.append((len(definitions), definitions[1:], definitions[0]))
        registration = register(namespace, definitions, replica)
        seen.append(registration)
        return registration

    store.register = recorded  # type: ignore[method-assign]
    changed = {**schedule, "e1": {"task": "t.run", "schedule": 5.0, "args": ["new"]}}
    beat = memory_scheduler(
        make_app(queue, {**changed, "e3": {"task": "t.run", "schedule": 9}}), clock, store
    )
    (count, rest, first), registration = seen
    assert count == 4
    assert [d.name for d in rest] == ["e1", "e2", "e3"]
    assert first == beat.entries["e0"].definition
    assert set(registration.changed) == {"e1"}
    assert store.states(beat.safebeat_config.namespace)["e1"].digest == beat.entries["e1"].digest


def test_crontab_fires_in_the_entry_time_zone(clock: FakeClock, queue: str) -> None:
    """A per-entry timezone decides the wall clock of a crontab slot."""
    app = make_app(
        queue,
        {
            "moscow-four-pm": {
                "task": "t.run",
                "schedule": crontab(minute=0, hour=16),
                "options": {"safebeat": {"timezone": "Europe/Moscow"}},
            }
        },
    )
    scheduler = memory_scheduler(app, clock)
    run(scheduler, clock, 3700, step=30)
    [headers] = drain(app, queue)
    assert headers["safebeat_window"] == "2026-03-01T13:00:00Z"  # 16:00 in Moscow


def test_large_bursts_are_claimed_in_batches_without_waiting(clock: FakeClock, queue: str) -> None:
    """More due entries than claim_batch are taken by further rounds of the same tick, all once."""
    app = make_app(queue, {f"e{i}": {"task": "t.run", "schedule": 10.0} for i in range(10)})
    scheduler = memory_scheduler(app, clock)
    scheduler.claim_batch = 4
    scheduler.tick()
    clock.advance(10)
    scheduler.tick()
    sent = windows_sent(drain(app, queue))
    assert len(sent) == 10
    assert set(sent.values()) == {1}


def test_entries_left_waiting_go_first_so_none_starves(
    clock: FakeClock, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When publishing a batch outlasts the interval, waiting entries still get their turn."""
    app = make_app(queue, {f"e{i}": {"task": "t.run", "schedule": 1.0} for i in range(8)})
    scheduler = memory_scheduler(app, clock)
    real_send = scheduler.publisher.send

    def slow_send(*args: Any, **kwargs: Any) -> None:
        real_send(*args, **kwargs)
        clock.advance(0.4)  # four sends outlast the entries' 1 s interval

    monkeypatch.setattr(scheduler.publisher, "send", slow_send)
    scheduler.claim_batch = 4
    scheduler.tick()
    clock.advance(1)
    for _ in range(4):
        scheduler.tick()
    sent = {entry for entry, _ in windows_sent(drain(app, queue))}
    assert sent == {f"e{i}" for i in range(8)}


def test_stock_beats_result_cleanup_entry_is_kept(clock: FakeClock, queue: str) -> None:
    """Like stock beat, a backend without auto-expiry gets the daily celery.backend_cleanup."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}}, result_expires=3600)
    scheduler = memory_scheduler(app, clock)
    assert set(scheduler.entries) == {"a", "celery.backend_cleanup"}
    assert scheduler.entries["celery.backend_cleanup"].schedule_text == "crontab 0 4 * * * in UTC"


def test_short_alias_is_registered_for_dash_s() -> None:
    """`celery beat -S safebeat` resolves to safebeat.Scheduler through the entry point."""
    from celery.utils.imports import load_extension_class_names, symbol_by_name

    aliases = dict(load_extension_class_names("celery.beat_schedulers"))
    assert symbol_by_name("safebeat", aliases=aliases) is Scheduler


def test_a_paused_entry_sends_nothing_and_resumes_with_the_next_window(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """While paused, an entry's windows are recorded as skipped (paused); resuming sends
    the next window only, never the ones that passed meanwhile; the skips are said at
    INFO, and nothing is warned."""
    app = make_app(
        queue, {"a": {"task": "t.run", "schedule": 60.0}, "b": {"task": "t.run", "schedule": 60.0}}
    )
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 61, step=1)
    assert {m["safebeat_entry"] for m in drain(app, queue)} == {"a", "b"}
    assert store.set_paused("unit", "a", Pause(True))
    with caplog.at_level(logging.INFO, "safebeat"):
        run(scheduler, clock, 300, step=1)
    assert {m["safebeat_entry"] for m in drain(app, queue)} == {"b"}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    said = [r.getMessage() for r in caplog.records if "of paused entry 'a'" in r.getMessage()]
    assert (
        said
        == ["safebeat: skipped 1 window(s) of paused entry 'a' (recorded with reason paused)"] * 5
    )
    paused = [r for r in store.history("unit", "a") if r.status is Status.SKIPPED]
    assert {r.reason for r in paused} == {"paused"}
    assert sum(r.skipped_count or 0 for r in paused) == 5
    assert store.set_paused("unit", "a", Pause(False))
    run(scheduler, clock, 60, step=1)
    sent = [m for m in drain(app, queue) if m["safebeat_entry"] == "a"]
    assert len(sent) == 1
    last_paused = max(r.window for r in paused)
    assert sent[0]["safebeat_window"] > format_window(last_paused)


def test_kombu_retries_a_publish_only_when_a_reconnect_fits_in_the_time_left(
    clock: FakeClock, queue: str
) -> None:
    """A reconnect (up to the connect timeout) must not carry a publish past the deadline."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}}, broker_connection_timeout=3)
    scheduler = memory_scheduler(app, clock)
    assert retry_policy(scheduler.connection, 10.0)["max_retries"] == 1
    assert retry_policy(scheduler.connection, 5.0)["max_retries"] == 0
    assert retry_policy(scheduler.connection, 0.5)["max_retries"] == 0


def test_a_store_that_drops_the_plan_is_reported_and_beat_does_not_spin(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A store whose tick result lacks the planner's plan (outside the contract) still gets
    its claims published; beat says so and looks again after max_interval, not at once."""

    class PlanDropping(MemoryStore):
        def tick(self, *args: Any, **kwargs: Any) -> Any:
            result = super().tick(*args, **kwargs)
            return None if result is None else replace(result, plan=TickPlan())

    # A lease long enough that the take-over pass (every fifth of it) is not what wakes it.
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}}, safebeat_execution_lease=60)
    scheduler = memory_scheduler(app, clock, PlanDropping(clock=clock.now))
    scheduler.runtime_interval = 60.0  # the next look at runtime entries is not what wakes it
    clock.advance(1)
    with caplog.at_level(logging.ERROR, "safebeat"):
        delay = scheduler.tick()
    assert [h["safebeat_entry"] for h in drain(app, queue)] == ["a"]
    assert "without the plan its planner made" in caplog.text
    assert delay == pytest.approx(scheduler.max_interval, abs=0.01)


def test_a_pause_with_an_end_ends_by_itself_on_every_replica(clock: FakeClock, queue: str) -> None:
    """Paused until 12:00:05.5, three replicas on one store skip the windows before it and
    send each window from it on once, with no resume written."""
    app = make_app(queue, {"fast": {"task": "t.run", "schedule": 1.0}})
    store = MemoryStore(clock=clock.now)
    replicas = [memory_scheduler(app, clock, store) for _ in range(3)]
    for replica in replicas:
        replica.tick()
    until = START.replace(microsecond=0) + timedelta(seconds=5.5)
    assert store.set_paused("unit", "fast", Pause(True, until=until, note="maintenance"))
    for _ in range(40):
        for replica in replicas:
            replica.tick()
        clock.advance(0.25)
    sent = windows_sent(drain(app, queue))
    assert max(sent.values()) == 1
    assert sorted(w for _, w in sent) == [f"2026-03-01T12:00:{s:02d}Z" for s in range(6, 11)]
    skipped = [r for r in store.history("unit", "fast") if r.status is Status.SKIPPED]
    assert {r.reason for r in skipped} == {"paused"}
    assert max(r.window for r in skipped) < until
    assert store.states("unit")["fast"].paused  # nothing wrote a resume: the end did it


def test_a_replica_cut_off_from_the_broker_claims_nothing_so_no_window_is_late(
    clock: FakeClock, queue: str
) -> None:
    """Two replicas on one store for ten minutes, one of them unable to reach its broker:
    the cut one claims and takes over nothing (it checks the broker first), so the
    healthy one sends every window within one tick of it, once."""
    schedule = {"a": {"task": "t.run", "schedule": 1.0}, "b": {"task": "t.run", "schedule": 7.0}}
    healthy_app = make_app(queue, schedule)
    cut_app = make_app(queue, schedule, broker_connection_timeout=0.2)
    cut_app.conf.broker_url = "redis://127.0.0.1:2/0"  # nothing listens there: refused
    store = MemoryStore(clock=clock.now)
    healthy = memory_scheduler(healthy_app, clock, store)
    cut = memory_scheduler(cut_app, clock, store)
    step = 0.5
    for _ in range(int(600 / step)):
        cut.tick()  # the cut replica ticks first: it would claim the window if it could
        healthy.tick()
        clock.advance(step)
    rows = [r for entry in schedule for r in store.history("unit", entry, limit=10_000)]
    assert rows
    assert {r.replica for r in rows} == {healthy.replica.id}
    late = [r for r in rows if r.sent_at is None or r.sent_at - r.window > timedelta(seconds=step)]
    assert late == []
    assert max(windows_sent(drain(healthy_app, queue)).values()) == 1
    assert cut.metrics.totals.dispatched == 0


class HeartbeatLog(MemoryStore):
    """A memory store that keeps the definitions each heartbeat carried (None: unchanged);
    the next heartbeat fails while `fail` is set."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: list[object] = []  # a dict (in full), a delta (a pair) or None
        self.fail = False

    def _heartbeat(self, beat: Heartbeat) -> bool:
        if self.fail:
            self.fail = False
            raise StoreUnavailable("connection refused")
        if beat.removed is not None:  # a delta: (changed, removed)
            self.sent.append((dict(beat.definitions or {}), sorted(beat.removed)))
        else:
            self.sent.append(None if beat.definitions is None else dict(beat.definitions))
        return super()._heartbeat(beat)


def test_an_idle_heartbeat_sends_the_digests_only_when_they_change(
    clock: FakeClock, queue: str
) -> None:
    """The first heartbeat carries every entry's digest, the next ones only say the replica
    is alive (the store keeps the digests); an entry added or removed is sent alone once
    (the digests that changed, the names removed)."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 3600.0}})
    store = HeartbeatLog(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 35, step=1)
    digest = scheduler.entries["a"].digest
    assert store.sent == [{"a": digest}, None, None, None]
    app.conf.beat_schedule["b"] = {"task": "t.run", "schedule": 7200.0}
    scheduler.setup_schedule()
    run(scheduler, clock, 25, step=1)
    both = {name: entry.digest for name, entry in scheduler.entries.items()}
    assert set(both) == {"a", "b"}
    assert store.sent[4:] == [({"b": both["b"]}, []), None, None]
    [mine] = store.replicas("unit")
    assert dict(mine.definitions) == both
    assert clock.now() - mine.heartbeat_at < timedelta(seconds=10)  # the last beat moved it
    del app.conf.beat_schedule["a"]
    scheduler.setup_schedule()
    run(scheduler, clock, 10, step=1)
    assert store.sent[7:] == [({}, ["a"])]
    assert [dict(r.definitions) for r in store.replicas("unit")] == [{"b": both["b"]}]


def test_a_change_to_a_lost_heartbeat_record_is_sent_in_full(clock: FakeClock, queue: str) -> None:
    """The store refuses a delta to a record it lost (flushed, pruned): every digest goes."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 3600.0}})
    store = HeartbeatLog(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 5, step=1)
    store.forget_replica("unit", scheduler.replica)
    app.conf.beat_schedule["b"] = {"task": "t.run", "schedule": 7200.0}
    scheduler.setup_schedule()
    run(scheduler, clock, 10, step=1)
    both = {name: entry.digest for name, entry in scheduler.entries.items()}
    assert store.sent[1:] == [({"b": both["b"]}, []), both]
    assert [dict(r.definitions) for r in store.replicas("unit")] == [both]


def test_a_store_that_lost_the_heartbeat_gets_the_digests_at_the_next_one(
    clock: FakeClock, queue: str
) -> None:
    """A record the store lost (flushed, pruned) is written in full at the next heartbeat,
    and so is the heartbeat after one that failed."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 3600.0}})
    store = HeartbeatLog(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 15, step=1)
    digests = {"a": scheduler.entries["a"].digest}
    assert store.sent == [digests, None]
    store.forget_replica("unit", scheduler.replica)
    run(scheduler, clock, 10, step=1)
    assert store.sent[2:] == [None, digests]
    assert [dict(r.definitions) for r in store.replicas("unit")] == [digests]
    store.fail = True
    run(scheduler, clock, 30, step=1)
    assert store.sent[4] == digests
    assert store.sent[5:] == [None] * len(store.sent[5:])


class FullHeartbeatLog(HeartbeatLog):
    """A store written before deltas: its `_heartbeat` knows no `Heartbeat.removed`."""

    heartbeat_deltas = False


def test_a_store_that_takes_no_delta_gets_the_digests_in_full(clock: FakeClock, queue: str) -> None:
    """A change is heartbeated in full to a store that does not say it applies deltas."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 3600.0}})
    store = FullHeartbeatLog(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 5, step=1)
    app.conf.beat_schedule["b"] = {"task": "t.run", "schedule": 7200.0}
    scheduler.setup_schedule()
    run(scheduler, clock, 10, step=1)
    both = {name: entry.digest for name, entry in scheduler.entries.items()}
    assert store.sent[1:] == [both]
