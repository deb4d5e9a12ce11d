"""`overlap="forbid"`: the policy on its own, its settings, and beat ticking on a fake clock."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from safebeat.config import Config, load_config
from safebeat.entries import compile_entry
from safebeat.errors import ConfigError
from safebeat.records import LeasedRun, RunEnd
from safebeat.stores.protocols import Outcome, Status
from safebeat.testing import FakeClock, memory_scheduler
from safebeat.windows import Due, Overlap, SkippedSpan, SkipReason, forbid_overlap
from tests.unit.test_scheduler import drain, make_app, windows_sent

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def due(*dispatch: datetime) -> Due:
    return Due(dispatch, (), dispatch[-1] + MINUTE if dispatch else None)


def test_a_running_previous_window_blocks_every_due_window() -> None:
    """While the entry has a live run, due windows become overlap skips."""
    decided = forbid_overlap(due(T0, T0 + MINUTE), running_since=T0 + 30 * S)
    assert decided.dispatch == ()
    assert decided.skipped == (SkippedSpan(T0, T0 + MINUTE, 2, SkipReason.OVERLAP),)
    assert decided.last_window == T0 + MINUTE


def test_without_a_running_window_only_the_newest_is_dispatched() -> None:
    """Nothing running: one window goes out, since two at once would overlap each other."""
    decided = forbid_overlap(due(T0, T0 + MINUTE, T0 + 2 * MINUTE), running_since=None)
    assert decided.dispatch == (T0 + 2 * MINUTE,)
    assert decided.skipped == (SkippedSpan(T0, T0 + MINUTE, 2, SkipReason.OVERLAP),)
    single = due(T0)
    assert forbid_overlap(single, running_since=None) == single


def test_overlap_settings_default_and_validate() -> None:
    """overlap defaults to allow, execution_lease to 30 s (overlap_timeout, superseded, is
    still accepted); bad values stop startup."""
    assert load_config({}, environ={}).overlap is Overlap.ALLOW
    assert load_config({}, environ={}).execution_lease == timedelta(seconds=10)
    assert load_config({"safebeat_execution_lease": "5s"}, environ={}).execution_lease == 5 * S
    with pytest.raises(ConfigError, match="safebeat_execution_lease=0: must be greater than"):
        load_config({"safebeat_execution_lease": 0}, environ={})
    assert load_config({}, environ={}).overlap_timeout == timedelta(hours=1)
    config = load_config(
        {}, environ={"SAFEBEAT_OVERLAP": "Forbid", "SAFEBEAT_OVERLAP_TIMEOUT": "5m"}
    )
    assert (config.overlap, config.overlap_timeout) == (Overlap.FORBID, timedelta(minutes=5))
    with pytest.raises(ConfigError, match="safebeat_overlap='never': expected one of"):
        load_config({"safebeat_overlap": "never"}, environ={})
    with pytest.raises(ConfigError, match="safebeat_overlap_timeout=0: must be greater than zero"):
        load_config({"safebeat_overlap_timeout": 0}, environ={})


def test_entries_take_forbid_from_their_options_or_the_default() -> None:
    """An entry's own overlap wins over safebeat_overlap; allow leaves the digest as it was."""

    def compile_with(options: dict[str, object], config: Config) -> object:
        raw = {"task": "t", "schedule": 10, "options": {"safebeat": options}}
        return compile_entry("e", raw, app_timezone=timezone.utc, config=config)

    forbid_default = Config(overlap=Overlap.FORBID)
    assert compile_with({}, forbid_default).overlap is Overlap.FORBID  # type: ignore[attr-defined]
    assert compile_with({"overlap": "allow"}, forbid_default).overlap is Overlap.ALLOW  # type: ignore[attr-defined]
    allowed, forbidden = compile_with({}, Config()), compile_with({"overlap": "forbid"}, Config())
    assert (
        allowed.digest
        == compile_entry(  # type: ignore[attr-defined]
            "e", {"task": "t", "schedule": 10}, app_timezone=timezone.utc, config=Config()
        ).digest
    )
    assert forbidden.digest != allowed.digest  # type: ignore[attr-defined]


def test_beat_skips_windows_while_the_previous_run_holds_its_lease(queue: str) -> None:
    """With forbid, a window due while the last run is unfinished and its lease alive is
    skipped as overlap; once the lease expires without a finish, the run blocks nothing."""
    clock = FakeClock(T0)
    app = make_app(
        queue,
        {
            "sync": {
                "task": "t.sync",
                "schedule": 10.0,
                "options": {"safebeat": {"overlap": "forbid"}},
            }
        },
        safebeat_execution_lease="25s",
        task_time_limit=5,  # a time limit plays no part: the lease decides
    )
    scheduler = memory_scheduler(app, clock)
    store = scheduler.store
    lease = timedelta(seconds=25)

    def tick_at(seconds: int) -> list[tuple[str, str]]:
        clock.set(T0 + seconds * S)
        scheduler.tick()
        return sorted(windows_sent(drain(app, queue)))

    scheduler.tick()
    assert tick_at(10) == [("sync", "2026-03-01T12:00:10Z")]
    first = LeasedRun("sync", T0 + 10 * S, "w1@host:1", 0)
    store.start_execution("unit", first, lease=lease)
    assert tick_at(20) == []  # the 12:00:10 run is alive
    store.finish_execution("unit", first, RunEnd(Outcome.SUCCESS, S))
    assert tick_at(30) == [("sync", "2026-03-01T12:00:30Z")]
    second = LeasedRun("sync", T0 + 30 * S, "w1@host:1", 0)
    store.start_execution("unit", second, lease=lease)
    assert tick_at(40) == []
    clock.set(T0 + 45 * S)
    # A live worker renews; its lease now ends at 12:01:10.
    store.renew_executions("unit", [second], lease=lease)
    assert tick_at(50) == []
    assert tick_at(60) == []  # 30 s after its start, a run still renewing blocks
    # Renewals stopped (its worker died): the lease ends at 12:01:10, and the run with it;
    # beat's take-over pass re-publishes the dead run's window (same task id) as well.
    assert tick_at(70) == [("sync", "2026-03-01T12:00:30Z"), ("sync", "2026-03-01T12:01:10Z")]
    rows = {r.window: r for r in store.history("unit", "sync")}
    assert {w.second for w, r in rows.items() if r.reason == "overlap"} == {20, 40, 50, 0}
    assert all(r.status is Status.SKIPPED for r in rows.values() if r.reason == "overlap")
