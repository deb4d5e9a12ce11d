"""safebeat's signals, sent by real schedulers on a controlled clock (kombu's memory broker)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from safebeat import signals
from safebeat.identity import Replica, task_id_for
from safebeat.records import Pause
from safebeat.stores.memory import MemoryStore
from safebeat.stores.protocols import NewClaim, Status, TickPlan
from safebeat.testing import FakeClock, memory_scheduler
from tests.unit.test_scheduler import START, FlakyStore, drain, make_app, run


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def queue() -> str:
    import uuid

    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def received() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every safebeat signal sent during the test, as (name, arguments)."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def receiver(signal: Any = None, sender: Any = None, **arguments: Any) -> None:
        calls.append((signal.name, arguments))

    for signal in signals.ALL:
        signal.connect(receiver, weak=False)
    yield calls
    for signal in signals.ALL:
        signal.disconnect(receiver)


def named(calls: list[tuple[str, dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    return [arguments for signal, arguments in calls if signal == f"safebeat.{name}"]


def test_each_claimed_window_is_announced_once_after_the_store_committed(
    clock: FakeClock, queue: str
) -> None:
    """window_claimed comes once per window, from the replica that claimed it, and its
    receiver already sees the claim in the store (sent after the transaction)."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    store = MemoryStore(clock=clock.now)
    replicas = [memory_scheduler(app, clock, store) for _ in range(3)]
    seen: list[tuple[str, str, bool]] = []

    def receiver(sender: Any = None, **arguments: Any) -> None:
        rows = store.history("unit", arguments["entry"])
        committed = any(r.task_id == arguments["task_id"] for r in rows)
        seen.append((arguments["task_id"], arguments["replica"], committed))

    signals.window_claimed.connect(receiver, weak=False)
    try:
        for _ in range(20):
            for replica in replicas:
                replica.tick()
            clock.advance(0.25)
    finally:
        signals.window_claimed.disconnect(receiver)
    sent = {m["id"] for m in drain(app, queue)}
    assert len(sent) == 5
    assert sorted(t for t, _, _ in seen) == sorted(sent)
    assert all(committed for _, _, committed in seen)
    assert {r for _, r, _ in seen} <= {replica.replica.id for replica in replicas}


def test_skipped_windows_are_announced_with_their_reason(
    clock: FakeClock, queue: str, received: list[tuple[str, dict[str, Any]]]
) -> None:
    """A paused entry's windows come as window_skipped with reason `paused` and a count."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 60.0}})
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 61, step=1)
    store.set_paused("unit", "a", Pause(True))
    run(scheduler, clock, 180, step=1)
    skipped = named(received, "window_skipped")
    assert skipped
    assert {s["reason"] for s in skipped} == {"paused"}
    assert sum(s["count"] for s in skipped) == 3
    assert {s["entry"] for s in skipped} == {"a"}


def test_a_taken_over_claim_is_announced_as_republished(
    clock: FakeClock, queue: str, received: list[tuple[str, dict[str, Any]]]
) -> None:
    """A claim a dead replica left unsent comes as window_republished with its attempts."""
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
    [republished] = named(received, "window_republished")
    assert (republished["task_id"], republished["attempts"]) == (task_id, 2)
    assert republished["replica"] == scheduler.replica.id
    assert named(received, "window_claimed") == []


def test_a_failed_tick_is_announced_with_the_error_and_the_retry(
    clock: FakeClock, queue: str, received: list[tuple[str, dict[str, Any]]]
) -> None:
    """With the store unreachable, each failed attempt comes as tick_failed."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    store = FlakyStore(clock=clock.now)
    store.down = True
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 10, step=1)
    failed = named(received, "tick_failed")
    assert len(failed) >= 2
    assert {f["reason"] for f in failed} == {"store unreachable"}
    assert all(f["retry_in"] > 0 for f in failed)
    assert "connection refused" in str(failed[0]["exception"])


def test_a_receiver_that_raises_is_logged_and_the_tick_goes_on(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A broken receiver is logged; every window is still published and recorded sent."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 1.0}})
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)

    def broken(sender: Any = None, **arguments: Any) -> None:
        raise RuntimeError("plugin bug")

    signals.window_claimed.connect(broken, weak=False)
    try:
        with caplog.at_level(logging.ERROR):
            run(scheduler, clock, 5, step=0.5)
    finally:
        signals.window_claimed.disconnect(broken)
    assert len(drain(app, queue)) == 4
    assert {r.status for r in store.history("unit", "a")} == {Status.SENT}
    assert "plugin bug" in caplog.text
    assert scheduler.metrics.totals.store_errors == 0


def test_docs_list_every_signal_with_its_arguments() -> None:
    """docs/signals.md has a table row for each signal, naming each argument its comment in
    safebeat/signals.py gives."""
    page = (Path(__file__).parents[2] / "docs" / "signals.md").read_text()
    source = (Path(__file__).parents[2] / "safebeat" / "signals.py").read_text()
    for signal in signals.ALL:
        short = signal.name.removeprefix("safebeat.")
        row = next(line for line in page.splitlines() if line.startswith(f"| `{short}` |"))
        comment = source[: source.index(f"{short} = Signal(")].rsplit("\n\n", 1)[-1]
        arguments = comment.split("Arguments:")[1].replace("#:", " ")
        arguments = re.sub(r"\([^)]*\)", "", arguments).rstrip().rstrip(".")
        names = {part.split()[0] for part in arguments.split(",")}
        assert names <= set(re.findall(r"`(\w+)`", row)), short
