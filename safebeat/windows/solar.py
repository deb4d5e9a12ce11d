"""Solar windows: the instants of a solar event at a place, to the second, the same on every
replica (ephem is an optional dependency, imported only when a solar entry asks)."""

from __future__ import annotations

from datetime import datetime, timedelta

from safebeat.windows.rules import DAY, EPOCH, SECOND, UTC, SolarRule

_SOLAR_EVENTS = {
    # event: (ephem method suffix, horizon, use the sun's centre)
    "dawn_astronomical": ("rising", "-18", True),
    "dawn_nautical": ("rising", "-12", True),
    "dawn_civil": ("rising", "-6", True),
    "sunrise": ("rising", "-0:34", False),
    "solar_noon": ("transit", "0", False),
    "sunset": ("setting", "-0:34", False),
    "dusk_civil": ("setting", "-6", True),
    "dusk_nautical": ("setting", "-12", True),
    "dusk_astronomical": ("setting", "-18", True),
}
SOLAR_EVENTS = frozenset(_SOLAR_EVENTS)
#: Days searched for an event that does not happen every day (polar day and night).
_SOLAR_SEARCH_DAYS = 366


#: Where each kind of event sits in the local mean day, shifted away from midnight:
#: risings fall between antitransit and transit (00-12 h local mean time), settings
#: between transit and antitransit (12-24 h), transits near noon.
_SOLAR_DAY_SHIFT = {
    "rising": timedelta(hours=6),
    "setting": timedelta(hours=-6),
    "transit": timedelta(0),
}


def _solar_event(rule: SolarRule, start: datetime, *, forward: bool) -> datetime | None:
    """Find the event after (or before) `start`, as an instant rounded to the second.

    ephem's answer for one event moves by a tenth of a second with the instant its
    search starts from, enough to round to different seconds. So the event is solved
    again from a start that depends only on the event's local mean day: every replica,
    whenever it asks, gets the same window.
    """
    import ephem  # noqa: PLC0415 - optional dependency, only solar entries need it

    kind, horizon, use_center = _SOLAR_EVENTS[rule.event]
    observer = ephem.Observer()
    observer.lat, observer.lon = str(rule.lat), str(rule.lon)
    observer.elev, observer.pressure, observer.horizon = 0, 0, horizon
    sun = ephem.Sun()
    kwargs = {"use_center": True} if use_center else {}
    direction = "next" if forward else "previous"
    find = getattr(observer, f"{direction}_{kind}")
    step = getattr(observer, f"{direction}_antitransit")
    cursor = ephem.Date(start.astimezone(UTC).replace(tzinfo=None))
    for _ in range(_SOLAR_SEARCH_DAYS):
        try:
            found = find(sun, start=cursor, **kwargs).datetime().replace(tzinfo=UTC)
        except ephem.CircumpolarError:
            cursor = step(sun, start=cursor)
            continue
        local_mean = timedelta(hours=rule.lon / 15) + _SOLAR_DAY_SHIFT[kind]
        day_start = EPOCH + ((found + local_mean - EPOCH) // DAY) * DAY - local_mean
        canonical_start = ephem.Date(day_start.replace(tzinfo=None))
        event = getattr(observer, f"next_{kind}")(sun, start=canonical_start, **kwargs)
        return _round_to_second(event.datetime().replace(tzinfo=UTC))
    return None


def _round_to_second(instant: datetime) -> datetime:
    rounded = instant.replace(microsecond=0)
    return rounded + SECOND if instant.microsecond >= 500_000 else rounded


def solar_latest(rule: SolarRule, now: datetime) -> datetime | None:
    cursor = now + SECOND
    for _ in range(3):
        event = _solar_event(rule, cursor, forward=False)
        if event is None or event <= now:
            return event
        cursor = event - SECOND
    return None


def solar_next(rule: SolarRule, after: datetime) -> datetime | None:
    cursor = after - SECOND
    for _ in range(3):
        event = _solar_event(rule, cursor, forward=True)
        if event is None or event > after:
            return event
        cursor = event + SECOND
    return None
