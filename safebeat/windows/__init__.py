"""Pure time math: which scheduled windows are due, given a rule, the shared state and "now".

No I/O and no clock reads happen here: every function takes the instants it needs, so
every replica that asks the same question gets the same answer. A *window* is the
scheduled instant (an aware UTC datetime), never the moment some process happened to send.

The package is split by job: `rules` (what an entry's windows follow), `policy` (how they
are decided), `answer` (the decision), `sequence` with `wallclock` and `solar` (the window
sequence of each rule), `counting`, `decide` (`due`) and `overlap` (rules applied after it).
"""

from safebeat.windows.answer import Due, SkippedSpan, SkipReason
from safebeat.windows.counting import MAX_COUNTED_DAYS, MAX_COUNTED_SKIPS, count_windows
from safebeat.windows.decide import due
from safebeat.windows.overlap import (
    OVERLAP_RULES,
    EntryFacts,
    apply_overlap,
    forbid_overlap,
    paused,
    queued_since,
    running_since,
    skip_if_queued,
)
from safebeat.windows.policy import (
    SKIP_DEFAULT_GRACE,
    Calendar,
    Jitter,
    Misfire,
    Overlap,
    Policy,
    YearlyDays,
)
from safebeat.windows.rules import (
    UTC,
    BoundedRule,
    ClockedRule,
    CrontabRule,
    FilteredRule,
    IntervalRule,
    Rule,
    SolarRule,
)
from safebeat.windows.sequence import latest_window, next_window, typical_period, windows_between
from safebeat.windows.solar import SOLAR_EVENTS
from safebeat.windows.wallclock import MAX_CRONTAB_SEARCH_DAYS, wall_to_instant

__all__ = [
    "MAX_COUNTED_DAYS",
    "MAX_COUNTED_SKIPS",
    "MAX_CRONTAB_SEARCH_DAYS",
    "OVERLAP_RULES",
    "SKIP_DEFAULT_GRACE",
    "SOLAR_EVENTS",
    "UTC",
    "BoundedRule",
    "Calendar",
    "ClockedRule",
    "CrontabRule",
    "Due",
    "EntryFacts",
    "FilteredRule",
    "IntervalRule",
    "Jitter",
    "Misfire",
    "Overlap",
    "Policy",
    "Rule",
    "SkipReason",
    "SkippedSpan",
    "SolarRule",
    "YearlyDays",
    "apply_overlap",
    "count_windows",
    "due",
    "forbid_overlap",
    "latest_window",
    "next_window",
    "paused",
    "queued_since",
    "running_since",
    "skip_if_queued",
    "typical_period",
    "wall_to_instant",
    "windows_between",
]
