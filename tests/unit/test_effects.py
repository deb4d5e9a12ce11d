"""`safebeat.claim()` and `safebeat.current_window()` as a task sees them, on a memory store."""

from __future__ import annotations

import time
import uuid
from datetime import date, datetime, timezone
from typing import Any

import pytest
from celery import Celery

import safebeat
from safebeat.effects import key_text

WINDOW = datetime(2026, 3, 2, 6, 0, tzinfo=timezone.utc)


@pytest.fixture
def app() -> Celery:
    app = Celery("effects", broker="memory://", set_as_current=False)
    app.conf.safebeat_url = f"memory://effects-{uuid.uuid4().hex}"
    return app


def test_current_window_reads_the_headers_of_the_running_task(app: Celery) -> None:
    """Inside a task sent by safebeat, current_window() is its entry and UTC window."""

    @app.task(bind=True, shared=False)
    def report(self: Any) -> object:
        return safebeat.current_window()

    headers = {"safebeat_entry": "weekly", "safebeat_window": "2026-03-02T06:00:00Z"}
    found = report.apply(headers=headers).get()
    assert found == safebeat.CurrentWindow("weekly", WINDOW)
    assert found.window.tzinfo is not None


def test_current_window_is_none_outside_safebeat(app: Celery) -> None:
    """Without safebeat's headers, or outside any task, current_window() is None."""

    @app.task(shared=False)
    def plain() -> object:
        return safebeat.current_window()

    assert plain.apply().get() is None
    assert (
        plain.apply(headers={"safebeat_window": "not a time", "safebeat_entry": "x"}).get() is None
    )
    assert safebeat.current_window() is None


def test_claim_is_true_once_per_key(app: Celery) -> None:
    """The first claim of a key is true; every later one, by anyone, is false."""
    key = ("weekly-report", 17, date(2026, 3, 2))
    assert safebeat.claim(key, app=app)
    assert not safebeat.claim(key, app=app)
    assert safebeat.claim(("weekly-report", 18, date(2026, 3, 2)), app=app)


def test_with_block_that_fails_releases_the_key_for_a_retry(app: Celery) -> None:
    """An exception inside `with claim(key)` releases the key, so a retry can do the effect."""
    sent: list[int] = []
    for attempt in range(2):
        try:
            with safebeat.claim("mail:17", app=app) as first:
                if first:
                    if attempt == 0:
                        raise ConnectionError("SMTP server went away")
                    sent.append(attempt)
        except ConnectionError:
            continue
    assert sent == [1]
    assert not safebeat.claim("mail:17", app=app)


def test_keep_holds_the_key_when_the_block_fails(app: Celery) -> None:
    """With on_error='keep', a failed block keeps the key: the effect is never repeated."""
    with pytest.raises(TimeoutError), safebeat.claim("mail:18", on_error="keep", app=app):
        raise TimeoutError("no answer after the mail was handed over")
    assert not safebeat.claim("mail:18", app=app)


def test_a_boolean_claim_stays_claimed_and_release_is_explicit(app: Celery) -> None:
    """Used as a boolean, a claim stays put until released by its owner."""
    claimed = safebeat.claim("invoice:9", app=app)
    assert claimed
    assert not safebeat.claim("invoice:9", app=app).release()  # not the owner's claim
    assert claimed.release()
    assert safebeat.claim("invoice:9", app=app)


def test_a_key_expires_after_keep_for(app: Celery) -> None:
    """After keep_for, the key can be claimed again."""
    assert safebeat.claim("daily:1", keep_for="50ms", app=app)
    time.sleep(0.1)
    assert safebeat.claim("daily:1", app=app)


def test_claim_inside_a_task_uses_the_task_app(app: Celery) -> None:
    """Inside a task, claim() finds the store through the running task's app."""

    @app.task(shared=False)
    def once() -> bool:
        return bool(safebeat.claim("inside-task"))

    assert once.apply().get() is True
    assert once.apply().get() is False


def test_keys_are_canonical_text() -> None:
    """Tuples become JSON arrays; dates, aware datetimes and UUIDs become their ISO text."""
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert key_text("plain text") == "plain text"
    text = key_text(("report", 17, date(2026, 3, 2), WINDOW, ident))
    assert text == '["report",17,"2026-03-02","2026-03-02T06:00:00Z","' + str(ident) + '"]'
    assert key_text(("a:b", "c")) != key_text(("a", "b:c"))


@pytest.mark.parametrize(
    ("key", "error", "message"),
    [
        ("", ValueError, "the key is empty"),
        ((), ValueError, "the key is empty"),
        (("report", 1.5), TypeError, "part 1.5 is a float"),
        (("report", True), TypeError, "part True is a bool"),
        (("report", datetime(2026, 3, 2)), TypeError, "is naive"),
        ("x" * 1001, ValueError, "at most 1000"),
        (42, TypeError, "a key is text or a tuple of parts"),
    ],
)
def test_bad_keys_are_rejected_with_the_culprit_named(
    key: Any, error: type[Exception], message: str
) -> None:
    """A key that cannot be stored faithfully is an error naming the part at fault."""
    with pytest.raises(error, match=message):
        key_text(key)


def test_bad_options_are_rejected(app: Celery) -> None:
    """An unknown on_error or a keep_for of zero is an error naming the option."""
    with pytest.raises(ValueError, match="on_error='drop'"):
        safebeat.claim("k", on_error="drop", app=app)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keep_for=0"):
        safebeat.claim("k", keep_for=0, app=app)
