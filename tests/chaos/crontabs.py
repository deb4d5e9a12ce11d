"""The chaos lab's crontab entries: thousands of minutely crontabs, and their windows.

`crontab_entries(count)` is the same on both ends of a run: the beat app builds its
`beat_schedule` from it (the count comes in `SB_CRONTABS`; thousands of entries would not
fit in one environment variable as JSON) and the counting takes each entry's windows from
it. The windows are computed here on their own, from `zoneinfo` and the UTC minutes, not
by safebeat's crontab code, so the count can catch that code getting a window wrong.

Every entry fires every minute, in one of several time zones (whole, half and
three-quarter hour offsets, none with daylight saving time). One in five leaves out two
hours of its local day, 12 h apart (in Kolkata or Kathmandu), so which UTC minutes are
windows depends on the zone, and the long-outage scenario, which moves the store's state
12 h into the past, keeps every window it moves on a slot.

Most keep the default missed-window policy (`latest`); a few have `misfire="all"`, some
with a `catchup_limit` above any backlog of the run (every window dispatched), some with
the default limit of 100.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

#: Zones without daylight saving time: the count here does not model clock changes
#: (tests/unit/test_dst.py does), and a 12 h backlog must not straddle one.
ZONES = ("UTC", "Asia/Kolkata", "America/Bogota", "Asia/Kathmandu", "Australia/Eucla")
#: `misfire="all"` with a limit above a 12 h backlog of minutely windows (720): every one.
FULL_CATCHUP_LIMIT = 1000
_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class CronSlots:
    """Every minute of the local hours `hours` in time zone `zone`."""

    zone: str
    hours: frozenset[int]

    def is_window(self, instant: datetime) -> bool:
        if instant.second or instant.microsecond:
            return False
        return instant.astimezone(_zone(self.zone)).hour in self.hours

    def windows(self, after: datetime, until: datetime) -> list[datetime]:
        """The windows in `(after, until]`, oldest first."""
        minute = after.astimezone(timezone.utc).replace(second=0, microsecond=0) + _MINUTE
        found = []
        every_hour = len(self.hours) == 24
        while minute <= until:
            if every_hour or self.is_window(minute):
                found.append(minute)
            minute += _MINUTE
        return found


@cache
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def misfire_of(index: int) -> tuple[str, int | None]:
    """The policy of the `index`-th entry: (misfire, catchup_limit or None for the default)."""
    if index % 500 == 7:
        return "all", FULL_CATCHUP_LIMIT
    if index % 500 == 257:
        return "all", None
    return "latest", None


def crontab_entries(count: int) -> dict[str, dict[str, Any]]:
    """`count` minutely crontab entries: name -> {"cron", "zone", "hours", "misfire", ...}."""
    entries: dict[str, dict[str, Any]] = {}
    for index in range(count):
        zone = ZONES[index % len(ZONES)]
        hours = set(range(24))
        if index % 10 in {1, 3}:  # Kolkata, Kathmandu
            hours -= {index % 12, index % 12 + 12}
        misfire, limit = misfire_of(index)
        spec: dict[str, Any] = {"zone": zone, "hours": sorted(hours), "misfire": misfire}
        if limit is not None:
            spec["catchup_limit"] = limit
        name = f"c{index:04d}-{zone.split('/')[-1].lower()}-{misfire}"
        if limit is not None:
            name += f"{limit}"
        entries[name] = spec
    return entries


def slots_of(spec: dict[str, Any]) -> CronSlots:
    return CronSlots(spec["zone"], frozenset(spec["hours"]))


def policy_group(spec: dict[str, Any]) -> str:
    """The group of `counting.AFTER_OUTAGE` an entry belongs to."""
    if spec["misfire"] == "latest":
        return "latest"
    return "all" if spec.get("catchup_limit") == FULL_CATCHUP_LIMIT else "all, limit 100"
