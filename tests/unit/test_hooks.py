"""safebeat.hooks on beat's side: around each publish and each tick, registered and removed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from safebeat import hooks
from safebeat.beat.publishing import Publisher
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock, memory_scheduler
from tests.unit.test_publishing import RETRY, claim_for, make_app, plain_entry, receive_all
from tests.unit.test_scheduler import START, drain
from tests.unit.test_scheduler import make_app as make_beat_app


@pytest.fixture
def registered() -> Iterator[list[Any]]:
    """The hooks a test registers, removed after it."""
    added: list[Any] = []
    yield added
    for hook in added:
        hooks.remove(hook)


def test_contrib_integrations_are_registered_hooks_and_beat_imports_none_of_them() -> None:
    """Sentry and OpenTelemetry are on the hooks by default, in that order (Sentry's trace
    holds the publish span); neither is active in a process that set neither up."""
    modules = [hook.__module__ for hook, _ in hooks._publish.pairs]
    assert modules[:2] == ["safebeat.contrib.sentry", "safebeat.contrib.opentelemetry"]
    assert [h.__module__ for h in hooks._tick.hooks] == ["safebeat.contrib.opentelemetry"]
    assert hooks.publishing() == ()


def test_a_publish_hook_is_entered_around_the_publish_and_adds_headers(
    registered: list[Any],
) -> None:
    """An active publish hook sees the entry, the claim and where it goes, adds a header
    that the message carries, and is left once the message is sent."""
    seen: list[tuple[str, Any, str | None, str | None]] = []

    @contextmanager
    def stamp(publish: hooks.Publish) -> Iterator[None]:
        publish.headers["x-ping"] = publish.claim.task_id
        seen.append(("enter", publish.entry.name, publish.destination, publish.transport))
        yield
        seen.append(("leave", publish.claim.task_id, None, None))

    registered.append(hooks.around_publish(stamp))
    app = make_app()
    claim = claim_for("e")
    with app.producer_or_acquire() as producer:
        Publisher(app).send(producer, plain_entry("e"), claim, retry_policy=RETRY)
    [message] = receive_all(app)
    assert message["headers"]["x-ping"] == claim.task_id
    queue = app.conf.task_default_queue
    assert seen == [("enter", "e", queue, "memory"), ("leave", claim.task_id, None, None)]


def test_an_inactive_publish_hook_is_not_entered(registered: list[Any]) -> None:
    """While its `active()` says no, a publish hook is not called: the message has no trace
    of it."""
    called: list[str] = []

    def never(publish: hooks.Publish) -> Any:
        called.append(publish.entry.name)
        raise AssertionError("entered")

    registered.append(hooks.around_publish(never, active=lambda: False))
    app = make_app()
    with app.producer_or_acquire() as producer:
        Publisher(app).send(producer, plain_entry("e"), claim_for("e"))
    assert len(receive_all(app)) == 1
    assert called == []


def test_a_hook_that_raises_is_logged_and_the_window_is_published(
    registered: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A publish hook that fails entering, and one that fails leaving, are logged; the
    message goes out once."""

    def broken_enter(publish: hooks.Publish) -> Any:
        raise RuntimeError("enter bug")

    @contextmanager
    def broken_leave(publish: hooks.Publish) -> Iterator[None]:
        yield
        raise RuntimeError("leave bug")

    registered.extend([hooks.around_publish(broken_enter), hooks.around_publish(broken_leave)])
    app = make_app()
    with caplog.at_level(logging.ERROR, "safebeat.hooks"), app.producer_or_acquire() as producer:
        Publisher(app).send(producer, plain_entry("e"), claim_for("e"))
    assert len(receive_all(app)) == 1
    assert "enter bug" in caplog.text
    assert "leave bug" in caplog.text


def test_an_active_predicate_that_raises_is_logged_and_the_window_is_published(
    registered: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """`active()` is a hook's code too: if it raises, that is logged, the hook counts as
    inactive and the message goes out once."""
    entered: list[str] = []

    def hook(publish: hooks.Publish) -> Any:
        entered.append(publish.entry.name)
        return contextmanager(lambda: (yield))()

    def broken_active() -> bool:
        raise RuntimeError("active bug")

    registered.append(hooks.around_publish(hook, active=broken_active))
    app = make_app()
    with caplog.at_level(logging.ERROR, "safebeat.hooks"), app.producer_or_acquire() as producer:
        Publisher(app).send(producer, plain_entry("e"), claim_for("e"), retry_policy=RETRY)
    assert len(receive_all(app)) == 1
    assert entered == []
    assert "active bug" in caplog.text


def test_an_error_of_the_body_is_not_chained_to_a_hook_that_failed_entering(
    registered: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A publish that fails after a hook failed entering raises its own error, not one
    "during handling of" the hook's: the hook's bug is in its own log line only."""

    def broken_enter(argument: object) -> Any:
        raise RuntimeError("enter bug")

    with (
        caplog.at_level(logging.ERROR, "safebeat.hooks"),
        pytest.raises(ValueError, match="publish failed") as raised,
        hooks.around((broken_enter,), object()),
    ):
        raise ValueError("publish failed")
    assert raised.value.__context__ is None
    assert "enter bug" in caplog.text


def test_a_tick_hook_is_told_what_the_tick_did(registered: list[Any]) -> None:
    """A tick hook is entered around each tick and reads, after it, the windows claimed."""
    ticks: list[tuple[str, int, int, bool]] = []

    @contextmanager
    def count(tick: hooks.Tick) -> Iterator[None]:
        yield
        ticks.append((tick.namespace, tick.claimed, tick.republished, tick.busy))

    registered.append(hooks.around_tick(count))
    clock = FakeClock(START)
    app = make_beat_app("q-hooks", {"a": {"task": "t.run", "schedule": 10.0}})
    scheduler = memory_scheduler(app, clock, MemoryStore(clock=clock.now))
    scheduler.tick()
    clock.advance(10)
    scheduler.tick()
    assert len(drain(app, "q-hooks")) == 1
    assert ("unit", 1, 0, False) in ticks
    assert sum(claimed for _, claimed, _, _ in ticks) == 1


def test_registering_twice_keeps_one_and_remove_takes_it_out(registered: list[Any]) -> None:
    """A hook registered twice is called once; removed, it is not called at all."""
    calls: list[str] = []

    def note(delivery: hooks.Delivery) -> None:
        calls.append(delivery.verdict)

    hooks.on_delivery(note)
    hooks.on_delivery(note)
    assert hooks._delivery.hooks.count(note) == 1
    hooks.remove(note)
    assert note not in hooks._delivery.hooks


def test_an_error_of_the_body_goes_through_each_hook_and_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the publish raises reaches each hook (a span records it), is raised on, and is
    not logged as a hook's failure; a hook that raises its own error while leaving is."""
    seen: list[str] = []

    @contextmanager
    def watch(argument: object) -> Iterator[None]:
        try:
            yield
        except RuntimeError as exc:
            seen.append(str(exc))
            raise

    @contextmanager
    def clumsy(argument: object) -> Iterator[None]:
        try:
            yield
        finally:
            raise ValueError("hook's own bug")

    with caplog.at_level(logging.ERROR, "safebeat.hooks"):
        with pytest.raises(RuntimeError, match="broker down"), hooks.around((watch,), None):
            raise RuntimeError("broker down")
        assert caplog.text == ""
        with pytest.raises(RuntimeError, match="broker down"), hooks.around((clumsy,), None):
            raise RuntimeError("broker down")
    assert seen == ["broker down"]
    assert "hook's own bug" in caplog.text
