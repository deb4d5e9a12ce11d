"""The claim batch: halved after a tick the store ended, grown back after quick ticks."""

from __future__ import annotations

from safebeat.beat.batching import ClaimBatch


def test_a_tick_that_took_too_long_halves_the_batch_down_to_the_floor() -> None:
    """Each tick the store ended halves the batch; it never goes below the floor."""
    batch = ClaimBatch(ceiling=5000, floor=10)
    sizes = [batch.too_long() for _ in range(12)]
    assert sizes[:3] == [2500, 1250, 625]
    assert sizes[-1] == 10
    assert min(sizes) == 10


def test_quick_ticks_grow_the_batch_back_to_the_ceiling() -> None:
    """A tick that took under a quarter of the lock timeout doubles the batch, up to the
    ceiling; a slower one leaves it as it is."""
    batch = ClaimBatch(ceiling=1000, floor=1)
    for _ in range(5):
        batch.too_long()
    assert batch.size == 31
    assert batch.finished(seconds=0.6, lock_timeout=2.0) == 31
    sizes = [batch.finished(seconds=0.1, lock_timeout=2.0) for _ in range(8)]
    assert sizes[:3] == [62, 124, 248]
    assert sizes[-1] == 1000


def test_a_floor_above_the_ceiling_is_the_ceiling() -> None:
    """A batch whose floor exceeds its ceiling claims the ceiling, and never less."""
    batch = ClaimBatch(ceiling=5, floor=50)
    assert batch.size == 5
    assert batch.too_long() == 5
