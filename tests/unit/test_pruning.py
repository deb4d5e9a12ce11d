"""`safebeat.stores.pruning.in_batches`: batches until done, or until the budget is spent."""

from __future__ import annotations

from datetime import timedelta

from safebeat.stores.pruning import in_batches
from safebeat.testing import FakeClock


class Backlog:
    """Rows to delete; each batch takes `seconds` of `clock`."""

    def __init__(self, rows: int, clock: FakeClock | None = None, seconds: float = 0) -> None:
        self.rows, self.clock, self.seconds, self.batches = rows, clock, seconds, 0

    def delete(self, batch: int) -> int:
        if self.clock is not None:
            self.clock.advance(self.seconds)
        self.batches += 1
        deleted = min(batch, self.rows)
        self.rows -= deleted
        return deleted


def test_without_a_budget_batches_run_until_one_comes_back_short() -> None:
    """25 rows in batches of 10: three batches, every row deleted."""
    backlog = Backlog(25)
    assert in_batches(backlog.delete, batch=10, budget=None) == 25
    assert (backlog.rows, backlog.batches) == (0, 3)


def test_a_backlog_that_is_a_whole_number_of_batches_ends_on_an_empty_one() -> None:
    """20 rows in batches of 10: the third batch finds none, and the call ends."""
    backlog = Backlog(20)
    assert in_batches(backlog.delete, batch=10, budget=None) == 20
    assert backlog.batches == 3


def test_a_spent_budget_stops_between_batches_and_the_next_call_goes_on() -> None:
    """Batches of 1 s with a 2.5 s budget: three per call (the budget is checked after each),
    and what is left goes in the next calls."""
    clock = FakeClock()
    backlog = Backlog(70, clock, seconds=1)
    budget = timedelta(seconds=2.5)
    assert in_batches(backlog.delete, batch=10, budget=budget, monotonic=clock.monotonic) == 30
    assert in_batches(backlog.delete, batch=10, budget=budget, monotonic=clock.monotonic) == 30
    assert in_batches(backlog.delete, batch=10, budget=budget, monotonic=clock.monotonic) == 10
    assert backlog.rows == 0


def test_one_batch_runs_even_with_no_budget_left() -> None:
    """A zero budget still deletes one batch, so every pass makes progress."""
    backlog = Backlog(25)
    assert in_batches(backlog.delete, batch=10, budget=timedelta(0)) == 10
