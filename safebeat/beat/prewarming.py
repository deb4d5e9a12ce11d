"""Building the message templates of the entries due next while beat would sleep.

The first message of an entry costs several times a later one: its arguments serialized,
their reprs, Celery's headers merged with the entry's (`safebeat.beat.message_template`).
In a burst every entry is sent for the first time, so the burst paid all of that between
its claim and its publish. Between ticks, the entries due at the next instant have their
templates built instead, in slices short enough that a tick is never late for it: each
slice ends after `Tuning.prewarm_slice` seconds, or halfway to the next wake-up, and beat
pauses as long between slices. Only the entries of the soonest instant are built, each
once, and at most as many as the publisher keeps (`Publisher.plan_cache_size`), so the
idle work follows the entries actually due, not the size of the schedule.

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

#: Entries built between two looks at the clock.
_STEP = 16


class Prewarms(Protocol):
    """What prewarming needs of a publisher (`safebeat.beat.publishing.Publisher`)."""

    plan_cache_size: int

    def prewarm(self, entry: Entry) -> None: ...


class Prewarming:
    """Where the prewarming of the soonest instant's entries got to."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._at: float | None = None  # the instant being prewarmed
        self._done = 0  # how many of its names were looked at

    def run(
        self,
        due_at: DueTimes,
        entries: Mapping[str, Entry],
        publisher: Prewarms,
        *,
        until: float,
    ) -> bool:
        """Build templates for the soonest instant's entries until the clock reaches
        `until`; whether some are left for another slice."""
        upcoming = due_at.next_names()
        if upcoming is None:
            return False
        at, names = upcoming
        if at != self._at:
            self._at, self._done = at, 0
        last = min(len(names), publisher.plan_cache_size)
        while self._done < last:
            if self._monotonic() >= until:
                return True
            step = names[self._done : min(self._done + _STEP, last)]
            self._done += len(step)
            for name in step:
                entry = entries.get(name)
                if entry is None or due_at.get(name) != at:
                    continue
                try:
                    publisher.prewarm(entry)
                except Exception:  # its send raises it again, where it is reported
                    logger.debug("safebeat: no template ahead for %r", name, exc_info=True)
        return False
