"""The pure rules over safebeat's records: run, take over or skip a delivery of a window."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from safebeat.records import Start, decide_start

NOW = datetime(2026, 3, 2, 6, 30, tzinfo=timezone.utc)
STALE_AFTER = timedelta(minutes=15)


def decide(
    started: timedelta | None,
    finished: bool = False,
    recorded_retries: int | None = 0,
    retries: int = 0,
) -> Start:
    """Decide for a row that started `started` before NOW (None: never started)."""
    started_at = None if started is None else NOW - started
    finished_at = started_at + timedelta(seconds=1) if finished and started_at else None
    return decide_start(
        started_at=started_at,
        finished_at=finished_at,
        recorded_retries=recorded_retries,
        retries=retries,
        now=NOW,
        stale_after=STALE_AFTER,
    )


def test_a_window_that_never_started_runs() -> None:
    """The first delivery of a dispatched window runs, whatever its retry number."""
    assert decide(None, recorded_retries=None) is Start.RUN
    assert decide(None, recorded_retries=None, retries=3) is Start.RUN


def test_a_celery_retry_of_the_window_runs_even_while_the_first_try_is_recorded() -> None:
    """A delivery whose retry number is above the recorded one is a Celery retry: it runs."""
    assert decide(timedelta(minutes=1), recorded_retries=0, retries=1) is Start.RUN
    assert decide(timedelta(minutes=1), finished=True, recorded_retries=1, retries=2) is Start.RUN


@pytest.mark.parametrize("retries", [0, 1])
def test_a_second_delivery_of_a_live_or_finished_run_is_a_duplicate(retries: int) -> None:
    """A run that started within stale_after, or that finished, makes a redelivery with a
    retry number not above the recorded one a duplicate."""
    assert decide(timedelta(minutes=1), recorded_retries=1, retries=retries) is Start.DUPLICATE
    assert decide(timedelta(hours=2), True, recorded_retries=1, retries=retries) is Start.DUPLICATE


def test_a_run_silent_past_stale_after_is_taken_over() -> None:
    """A run that started more than stale_after ago and never finished is taken over; at
    exactly stale_after it still counts as alive."""
    assert decide(STALE_AFTER + timedelta(microseconds=1)) is Start.TAKEOVER
    assert decide(STALE_AFTER) is Start.DUPLICATE
