"""A crontab with seconds: Celery's `crontab` plus a `second` field, for `beat_schedule`.

    from safebeat.crontab import crontab

    app.conf.beat_schedule = {
        "poll": {"task": "proj.tasks.poll", "schedule": crontab(second="*/15", hour="8-18")},
    }

`second` takes the same forms as `minute` (a number, `*/15`, `0,30`, `10-20`, a set) and
defaults to 0, so without it this is Celery's crontab exactly. Only safebeat's schedulers
honour seconds: stock beat fires at most once a minute, so `is_due` refuses a schedule
with seconds; `safebeat exec` refuses 6-field cron text. django-celery-beat's own
scheduler copies it into a `CrontabSchedule` row, which has no seconds (documented in
docs/windows.md; nothing here can stop that copy).
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from celery import schedules

__all__ = ["crontab", "seconds_of"]


class crontab(schedules.crontab):  # type: ignore[misc] # Celery is untyped
    """Celery's crontab with a `second` field (seconds first, like Quartz and APScheduler)."""

    def __init__(  # noqa: PLR0917 - Celery's positional order, with the seconds first
        self,
        second: str | int | Set[int] = 0,
        minute: str | int | Set[int] = "*",
        hour: str | int | Set[int] = "*",
        day_of_week: str | int | Set[int] = "*",
        day_of_month: str | int | Set[int] = "*",
        month_of_year: str | int | Set[int] = "*",
        **kwargs: Any,
    ) -> None:
        super().__init__(minute, hour, day_of_week, day_of_month, month_of_year, **kwargs)
        self._orig_second = schedules.cronfield(second)
        self.second: set[int] = self._expand_cronspec(second, 60)

    def __repr__(self) -> str:
        fields = " ".join(
            str(schedules.cronfield(value) or "*")
            for value in (
                self._orig_second,
                self._orig_minute,
                self._orig_hour,
                self._orig_day_of_month,
                self._orig_month_of_year,
                self._orig_day_of_week,
            )
        )
        return f"<safebeat.crontab: {fields} (s m h dM MY d)>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            self.__class__,
            (
                self._orig_second,
                self._orig_minute,
                self._orig_hour,
                self._orig_day_of_week,
                self._orig_day_of_month,
                self._orig_month_of_year,
            ),
            self._orig_kwargs,
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, schedules.crontab):
            return bool(super().__eq__(other)) and seconds_of(other) == seconds_of(self)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] # mutable, compared by value like Celery's

    def is_due(self, last_run_at: Any) -> Any:
        """Celery's answer on the minute; with other seconds, refuse: a scheduler other than
        safebeat's would fire this once a minute at most."""
        if self.second == {0}:
            return super().is_due(last_run_at)
        raise TypeError(
            f"{self!r} has seconds, which only safebeat's scheduler honours; run beat with "
            "-S safebeat.Scheduler (or safebeat's Django scheduler)"
        )


def seconds_of(schedule: object) -> frozenset[int]:
    """The seconds of each minute a crontab fires on: {0} for Celery's own crontab."""
    seconds = getattr(schedule, "second", None)
    return frozenset(seconds) if isinstance(seconds, Set) else frozenset({0})
