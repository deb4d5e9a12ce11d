"""Instants as the console shows them: to the second in UTC, with the app's local time
beside where the app keeps another zone, and the exact value in the element's title."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

from markupsafe import Markup

from safebeat.entries import zone_name
from safebeat.identity import format_window


def local_zone(app: object) -> tzinfo | None:
    """The zone the app's schedule speaks (Celery's `timezone`), or None for UTC or no app."""
    zone = getattr(app, "timezone", None)
    if not isinstance(zone, tzinfo) or zone_name(zone) == "UTC":
        return None
    return zone


def instant_html(instant: datetime | None, zone: tzinfo | None) -> Markup:
    """`2026-03-01 09:00:05 UTC`, then `10:00:05 CET` in `zone` (with its date where the
    day differs), as one `<time>` that does not wrap; `-` for none."""
    if instant is None:
        return Markup("-")
    exact = format_window(instant)
    utc = instant.astimezone(timezone.utc)
    local = Markup("")
    if zone is not None:
        here = instant.astimezone(zone)
        shape = "%H:%M:%S %Z" if here.date() == utc.date() else "%Y-%m-%d %H:%M:%S %Z"
        local = Markup(' <span class="local">{}</span>').format(here.strftime(shape))
    shown = f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    return Markup('<time datetime="{0}" title="{0}"><span>{1}</span>{2}</time>').format(
        exact, shown, local
    )


def example_instant(now: datetime, ahead: timedelta) -> str:
    """An instant `ahead` of `now`, on the hour, as an operator would type it (UTC, `Z`)."""
    return format_window((now + ahead).replace(minute=0, second=0, microsecond=0))
