"""A schedule in words, from the text the store keeps for it (`safebeat.entries.describe`).

Works from the text alone, so the console can say it without the Celery app. A schedule
it has no words for is returned as it is.
"""

from __future__ import annotations

import re

_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_UNITS = ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))
_INTERVAL = re.compile(r"every (?P<seconds>[0-9.e+]+)s(?: from (?P<anchor>\S+))?$")
_CRONTAB = re.compile(r"crontab (?P<fields>(?:\S+ ){4,5}\S+) in (?P<zone>\S+)$")
_BOUNDS = re.compile(r"^(?P<rule>.*?)(?P<start> not before \S+)?(?P<end> not after \S+)?$")


def in_words(schedule: str) -> str:
    """`every 300s` -> "every 5 minutes"; `crontab 0 3 * * * in UTC` -> "every day at 03:00 UTC".

    A six-field crontab (seconds first) and bounds (`not before`, `not after`) read too.
    """
    for runner in ("exec", "apscheduler"):  # entries run by `safebeat exec`, APScheduler
        if schedule.startswith(f"{runner} "):
            inner = schedule.removeprefix(f"{runner} ")
            words = in_words(inner)
            return schedule if words == inner else f"{words} ({runner})"
    bounds = _BOUNDS.match(schedule)
    if bounds and (bounds["start"] or bounds["end"]):
        words = in_words(bounds["rule"])
        return schedule if words == bounds["rule"] else words + schedule[len(bounds["rule"]) :]
    interval = _INTERVAL.match(schedule)
    if interval:
        words = _every(float(interval["seconds"]))
        return words if interval["anchor"] is None else f"{words} from {interval['anchor']}"
    crontab = _CRONTAB.match(schedule)
    if crontab:
        return _crontab(crontab["fields"].split(), crontab["zone"]) or schedule
    return schedule


def _every(seconds: float) -> str:
    for size, unit in _UNITS:
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {seconds:g} seconds"


def _crontab(fields: list[str], zone: str) -> str | None:
    second = fields.pop(0) if len(fields) == 6 else "0"
    minute, hour, day, month, weekday = fields
    if month != "*" or not second.isdigit():
        return None
    if second == "0" and (minute, hour, day, weekday) == ("*", "*", "*", "*"):
        return "every minute"
    if second == "0" and minute.isdigit() and (hour, day, weekday) == ("*", "*", "*"):
        return f"every hour at minute {int(minute)}"
    if not (minute.isdigit() and hour.isdigit()):
        return None
    at = f"{int(hour):02d}:{int(minute):02d}" + (f":{int(second):02d}" if second != "0" else "")
    return _on_days(day, weekday, f"at {at} {zone}")


def _on_days(day: str, weekday: str, at: str) -> str | None:
    days = None
    if (day, weekday) == ("*", "*"):
        days = "every day"
    elif day == "*" and weekday.isdigit() and int(weekday) < 7:
        days = f"every {_DAYS[int(weekday)]}"
    elif day == "*" and weekday == "1-5":
        days = "every weekday"
    elif day.isdigit() and weekday == "*":
        days = f"on day {int(day)} of every month"
    return None if days is None else f"{days} {at}"
