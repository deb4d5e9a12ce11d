"""The answer for one entry at one instant: windows to dispatch, spans skipped and why."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class SkipReason(str, enum.Enum):
    """Why a window was recorded as skipped instead of dispatched."""

    MISSED = "missed"  # passed over: a later window of the same entry superseded it
    LATE = "late"  # later than the grace period allows
    CATCHUP_LIMIT = "catchup_limit"  # older than the newest `catchup_limit` missed windows
    CALENDAR = "calendar"  # on a day the entry's calendar excludes
    OVERLAP = "overlap"  # the entry's previous run was still running (overlap="forbid")
    PAUSED = "paused"  # the entry was paused (safebeat pause)
    QUEUED = "queued"  # the entry's previous window still waited in the queue (skip_if_queued)
    OPERATOR = "operator"  # an operator skipped it ahead of time (safebeat skip-next)


@dataclass(frozen=True)
class SkippedSpan:
    """Consecutive windows skipped for one reason; `count` is None when too many to count."""

    first: datetime
    last: datetime
    count: int | None
    reason: SkipReason


@dataclass(frozen=True)
class Due:
    """The answer for one entry at one instant.

    `next_send` is when `next_window` is to be sent, when jitter delays it; `wake_at` is
    the instant to look at the entry again.
    """

    dispatch: tuple[datetime, ...]
    skipped: tuple[SkippedSpan, ...]
    next_window: datetime | None
    next_send: datetime | None = None

    @property
    def wake_at(self) -> datetime | None:
        """When this entry next has something to decide: its next window's send time."""
        return self.next_send if self.next_send is not None else self.next_window

    @property
    def last_window(self) -> datetime | None:
        """The newest window this answer decides about, dispatched or skipped."""
        if not self.skipped:  # the common case, once per due entry per tick
            return max(self.dispatch) if self.dispatch else None
        return max((*self.dispatch, *(span.last for span in self.skipped)))
