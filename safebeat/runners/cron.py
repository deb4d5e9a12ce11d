"""Cron text, and the window a command started by cron or a Kubernetes CronJob belongs to.

Pure: no I/O and no clock reads; every function takes the instants it needs. Used by
`safebeat exec`.

A 5-field schedule (`"0 3 * * *"`, or a macro such as `@daily`) is parsed by Celery's
own `crontab` and compiled like a `beat_schedule` entry, so its windows are the ones
beat computes: slots in the schedule's time zone, a slot in the spring-forward gap fires
at the first instant after it, a slot in the repeated autumn hour fires once.

The window of one start is either

- the scheduled time the starter passed (a CronJob's scheduled time, from the Job's
  `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation or from the Job's name,
  which ends in that minute counted from the Unix epoch), which must be a slot of the
  schedule; or
- the latest slot at or before now, on the clock the starter fired by (cron: this host's).

Either way a window more than `grace` late (or early) is refused: a cron line that does
not match `--schedule`, a host that slept through its slot, or a pod that waited too long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from celery.schedules import crontab

from safebeat.config import Config
from safebeat.display import BadInstant, parse_instant
from safebeat.entries import compile_entry
from safebeat.errors import EntryError, SafebeatError
from safebeat.identity import format_window
from safebeat.limits import MAX_INSTANT, MIN_INSTANT, LimitError, check_instant
from safebeat.windows import CrontabRule, latest_window

#: Cron's shorthands, as 5 fields (`@reboot` is not a schedule: it has no windows).
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: The 5 fields: Celery's `crontab` argument, and the name cron's manual gives it.
FIELDS = (
    ("minute", "minute"),
    ("hour", "hour"),
    ("day_of_month", "day-of-month"),
    ("month_of_year", "month"),
    ("day_of_week", "day-of-week"),
)
#: The annotation the CronJob controller puts on each Job it creates (RFC 3339).
SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
#: A CronJob names each Job `<cronjob name>-<scheduled time in minutes since the epoch>`.
_JOB_NAME = re.compile(r"^.+-([0-9]{1,12})$")
_UTC = timezone.utc


class CronError(SafebeatError):
    """Cron text, a time zone or a scheduled time that cannot be read; the message says which."""


class NoWindow(SafebeatError):
    """No window of the schedule fits this start (too late, too early, or not a slot)."""


@dataclass(frozen=True)
class Found:
    """The window of one start, and where it came from (for log lines)."""

    window: datetime
    source: str


def parse_schedule(text: str, tz: str) -> CrontabRule:
    """Compile 5-field cron text (or a macro) in time zone `tz` (an IANA name) into a rule.

    Fields are read by Celery's crontab parser: numbers, ranges, lists, steps, `*`, and
    names of months and days of the week. `?` is read as `*`, as Kubernetes does. A
    schedule that restricts both day-of-month and day-of-week is refused: cron runs it
    on days matching either, a crontab only on days matching both.
    """
    fields = _fields(text)
    for (argument, label), value in zip(FIELDS, fields, strict=True):
        try:
            crontab(**{argument: value})
        except ValueError as exc:
            hint = " (Sunday is 0 or sun)" if argument == "day_of_week" and "7" in value else ""
            raise CronError(f"schedule {text!r}: {label} field {value!r}: {exc}{hint}") from None
    if fields[2] != "*" and fields[4] != "*":
        raise CronError(
            f"schedule {text!r} restricts both day-of-month ({fields[2]}) and day-of-week "
            f"({fields[4]}): cron runs it on days matching either, safebeat's crontab on "
            "days matching both; write one of them as * (use two entries for both)"
        )
    arguments = {argument: value for (argument, _), value in zip(FIELDS, fields, strict=True)}
    raw = {
        "task": "safebeat.exec",
        "schedule": crontab(**arguments),
        "options": {"safebeat": {"timezone": tz}},
    }
    try:
        entry = compile_entry("exec", raw, app_timezone=_UTC, config=Config())
    except EntryError as exc:
        raise CronError(f"--tz {tz!r}: {exc.problem}") from None
    assert isinstance(entry.rule, CrontabRule)  # noqa: S101 - a crontab compiles to one
    return entry.rule


def _fields(text: str) -> list[str]:
    stripped = text.strip()
    if stripped.startswith("@"):
        if stripped.lower() not in MACROS:
            known = ", ".join(MACROS)
            raise CronError(f"schedule {text!r}: unknown macro; known: {known}")
        stripped = MACROS[stripped.lower()]
    fields = ["*" if field == "?" else field for field in stripped.split()]
    if len(fields) == 6:
        raise CronError(
            f"schedule {text!r} has 6 fields: cron and Kubernetes CronJobs start a command at "
            "most once a minute, so seconds cannot be honoured here; use 5 fields (minute "
            "hour day-of-month month day-of-week), or a beat entry with "
            "safebeat.crontab.crontab(second=...)"
        )
    if len(fields) != 5:
        raise CronError(
            f"schedule {text!r} has {len(fields)} field(s); expected 5 (minute hour "
            "day-of-month month day-of-week, e.g. '0 3 * * *') or a macro such as @daily"
        )
    return fields


def parse_scheduled_time(text: str) -> datetime:
    """Read a scheduled time in RFC 3339 with an offset (the CronJob annotation's form)."""
    try:
        return check_instant(parse_instant(text), "scheduled time")
    except LimitError as exc:
        raise CronError(f"scheduled time {text!r} {exc.problem}") from None
    except BadInstant as exc:
        problem = (
            "has no offset; add Z (UTC) or one like +03:00"
            if exc.zoneless
            else "is not an RFC 3339 time such as 2026-03-02T03:00:00+03:00"
        )
        raise CronError(f"scheduled time {text!r} {problem}") from None


def job_name_time(name: str) -> datetime:
    """Read the scheduled time from the name a CronJob gives its Job (`<cronjob>-<minute>`)."""
    match = _JOB_NAME.match(name.strip())
    if match is None:
        raise CronError(
            f"job name {name!r} does not end in the scheduled minute a CronJob gives its Jobs "
            "(<cronjob name>-<minutes since 1970>); a Job created by hand has no window"
        )
    try:
        return check_instant(datetime.fromtimestamp(int(match.group(1)) * 60, _UTC), "window")
    except (LimitError, OverflowError, ValueError, OSError):
        raise CronError(
            f"job name {name!r} ends in minute {match.group(1)}, which is outside the years "
            f"{MIN_INSTANT.year} to {MAX_INSTANT.year} (limits: docs/limits.md)"
        ) from None


def find_window(
    rule: CrontabRule,
    *,
    now: datetime,
    grace: timedelta,
    scheduled_time: str | None = None,
    job_name: str | None = None,
) -> Found:
    """Decide the window of one start at `now` (see the module's docstring).

    `scheduled_time` (RFC 3339) and `job_name` (a CronJob's Job name) name the window;
    given both, they must agree. Without them the window is the latest slot at or before
    `now`. Raises CronError for unreadable input and NoWindow when no window fits.
    """
    given = []
    if scheduled_time:
        given.append(Found(parse_scheduled_time(scheduled_time), "the scheduled time"))
    if job_name:
        given.append(Found(job_name_time(job_name), f"job name {job_name.strip()!r}"))
    if len(given) == 2 and given[0].window != given[1].window:
        raise CronError(
            f"the scheduled time ({format_window(given[0].window)}) and the job name "
            f"({format_window(given[1].window)}) name different windows"
        )
    if given:
        found = given[0]
        if latest_window(rule, found.window) != found.window:
            raise NoWindow(
                f"{found.source} {format_window(found.window)} is not a slot of the schedule; "
                "do --schedule and --tz match the CronJob's schedule and timeZone?"
            )
        if found.window - now > grace:
            raise NoWindow(
                f"{found.source} {format_window(found.window)} is {found.window - now} ahead "
                f"of this host's clock ({format_window(now)}), more than --grace {grace}; "
                "is the clock right?"
            )
    else:
        window = latest_window(rule, now)
        if window is None:
            raise NoWindow(f"the schedule has no slot before {format_window(now)}")
        found = Found(window, "the latest slot")
    late = now - found.window
    if late > grace:
        raise NoWindow(
            f"{found.source} {format_window(found.window)} was {late} ago, more than "
            f"--grace {grace}; not running it late (does --schedule match the line that "
            "starts this command, and did the host sleep through the slot?)"
        )
    return found
