"""Building the message templates of the entries due next while beat would sleep.

The first message of an entry costs several times a later one: its arguments serialized,
their reprs, Celery's headers merged with the entry's (`safebeat.beat.message_template`).
In a burst every entry is sent for the first time, so the burst paid all of that between
its claim and its publish. Between ticks, the entries due at the next instant have their
templates built instead, in slices short enough that a tick is never late for it: each
slice ends after `Tuning.prewarm_slice` seconds, or halfway to the next wake-up (the clock
is looked at before each entry), and beat pauses as long between slices. Only the entries
due within `AHEAD` seconds are built, each once, soonest first, and at most as many as
the publisher keeps (`Publisher.plan_cache_size`), so the idle work follows the entries
actually due, not the size of the schedule.

A template belongs to the compiled entry it was built for: an entry edited at run time is
a new compiled entry, which gets a template of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from safebeat.beat.due_times import DueTimes
from safebeat.entries import Entry

logger = logging.getLogger("safebeat.scheduler")

#: How soon an instant must come for its entries to be prewarmed (seconds), and how many
#: instants at most: the windows of one burst are planned round by round, each round's
#: entries at an instant of its own a few milliseconds from the others'; an entry due
#: later is left alone until then (beat wakes at least every `Tuning.max_interval`).
AHEAD = 30.0
INSTANTS = 256


class Prewarms(Protocol):
    """What prewarming needs of a publisher (`safebeat.beat.publishing.Publisher`)."""

    plan_cache_size: int

    def prewarm(self, entry: Entry) -> None: ...


class Prewarming:
    """How far the prewarming of each upcoming instant's entries got."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._done: dict[float, int] = {}  # instant -> how many of its names were looked at

    def run(
        self,
        due_at: DueTimes,
        entries: Mapping[str, Entry],
        publisher: Prewarms,
        *,
        until: float,
    ) -> bool:
        """Build templates for the soonest instants' entries until the clock reaches
        `until`; whether some are left for another slice."""
        upcoming = due_at.soonest(self._monotonic() + AHEAD, INSTANTS)
        done = {at: self._done.get(at, 0) for at, _ in upcoming}
        self._done = done
        room = publisher.plan_cache_size
        for at, names in upcoming:
            last = min(len(names), room)
            room -= last
            while done[at] < last:
                # Before each entry: one template of large arguments takes milliseconds,
                # so a few of them in a row would overrun the slice and make a tick late.
                if self._monotonic() >= until:
                    return True
                name = names[done[at]]
                done[at] += 1
                self._prewarm(name, at, due_at, entries, publisher)
            if room <= 0:
                break
        return False

    @staticmethod
    def _prewarm(
        name: str, at: float, due_at: DueTimes, entries: Mapping[str, Entry], publisher: Prewarms
    ) -> None:
        entry = entries.get(name)
        if entry is None or due_at.get(name) != at:
            return
        try:
            publisher.prewarm(entry)
        except Exception:  # its send raises it again, where it is reported
            logger.debug("safebeat: no template ahead for %r", name, exc_info=True)
