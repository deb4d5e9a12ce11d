"""Sentry Crons, once per window: safebeat's side of `CeleryIntegration(monitor_beat_tasks=True)`.

sentry-python monitors stock beat by wrapping `celery.beat.Scheduler.apply_entry`: before
each publish it sends an "in progress" check-in and adds its monitor headers to the
message; its worker side then sends "ok" or "error" from Celery's task signals, with the
check-in id it finds in those headers. safebeat never calls `apply_entry`, so the
dispatcher does the beat half here instead, for the window it claimed, just before it
publishes it:

- the monitor slug is the entry's name and its config comes from the entry's rule
  (crontab with its own time zone, or an interval of whole minutes, hours or days);
- the check-in id is derived from the window's task id, so a re-published window (same
  task id) reports to the same check-in: one check-in per window, whichever replica
  publishes it and however often;
- the headers are the ones Sentry's worker side reads, also inside the nested `headers`
  Celery hands the worker (celery#4875), with Sentry's trace propagation headers.

It is a publish hook (`safebeat.hooks.around_publish`), active while Sentry monitors beat
tasks, registered when `safebeat.hooks` is loaded. Nothing to set up beyond Sentry's own
`sentry_sdk.init(integrations=[CeleryIntegration(monitor_beat_tasks=True)])`;
`exclude_beat_tasks` is honoured. Entries Sentry Crons cannot describe (solar events,
one-off times, intervals that are not whole minutes) are published without a monitor, with
a warning once per entry. See docs/sentry.md.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import Iterator, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Any, cast

from safebeat import hooks
from safebeat.entries import Entry, crontab_fields, zone_name
from safebeat.records import Claim
from safebeat.windows import BoundedRule, CrontabRule, IntervalRule

logger = logging.getLogger("safebeat.sentry")

SLUG_HEADER = "sentry-monitor-slug"
CONFIG_HEADER = "sentry-monitor-config"
CHECK_IN_HEADER = "sentry-monitor-check-in-id"
START_HEADER = "sentry-monitor-start-timestamp-s"

_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))
_warned: set[str] = set()


def monitor_config(entry: Entry) -> dict[str, Any] | None:
    """Sentry's monitor config for an entry's schedule, or None if Sentry cannot express it.

    A crontab gives `{"schedule": {"type": "crontab", "value": "m h dom mon dow"},
    "timezone": <its zone>}`; an interval the largest unit that divides it evenly
    (`{"type": "interval", "value": 2, "unit": "hour"}`, in UTC). Crontabs with seconds,
    solar events, one-off times and intervals not a whole number of minutes give None.
    """
    rule = entry.rule.rule if isinstance(entry.rule, BoundedRule) else entry.rule
    if isinstance(rule, CrontabRule):
        if rule.seconds != (0,):
            return None
        return {
            "schedule": {"type": "crontab", "value": crontab_fields(rule)},
            "timezone": zone_name(rule.tz),
        }
    if isinstance(rule, IntervalRule):
        micro = rule.every // timedelta(microseconds=1)
        for unit, seconds in _UNITS:
            if micro % (seconds * 1_000_000) == 0:
                value = micro // (seconds * 1_000_000)
                return {
                    "schedule": {"type": "interval", "value": value, "unit": unit},
                    "timezone": "UTC",
                }
    return None


def check_in_id(claim: Claim) -> str:
    """The check-in id of a window: its task id's hex, the same on every publish of it."""
    return uuid.UUID(claim.task_id).hex


def _integration() -> Any:
    """Sentry's Celery integration when it monitors beat tasks here, else None."""
    if sys.modules.get("sentry_sdk") is None:
        return None  # never import Sentry for a process that does not use it (or blocks it)
    import sentry_sdk  # noqa: PLC0415 - only where the application loaded it
    from sentry_sdk.integrations.celery import CeleryIntegration  # noqa: PLC0415

    integration = sentry_sdk.get_client().get_integration(CeleryIntegration)
    if integration is None or not integration.monitor_beat_tasks:
        return None
    return integration


def monitoring() -> bool:
    """Whether Sentry's Celery integration monitors beat tasks in this process."""
    return _integration() is not None


@contextmanager
def window(entry: Entry, claim: Claim, headers: MutableMapping[str, Any]) -> Iterator[None]:
    """Around one window's publish: its own trace, its "in progress" check-in first, and
    Sentry's headers added to `headers` (as Sentry's `apply_entry` wrapper does).

    Does nothing unless Sentry's Celery integration is active with `monitor_beat_tasks=True`
    and the entry is monitored. A Sentry problem costs the check-in, never the publish.
    """
    config = None
    try:
        integration = _integration()
        if integration is not None:
            config = _monitored(entry, integration)
    except Exception:  # a monitoring problem must never stop a publish (logged)
        logger.exception("safebeat: entry %r: Sentry check-in failed; publishing", entry.name)
    if config is None:
        yield
        return
    import sentry_sdk  # noqa: PLC0415

    with sentry_sdk.isolation_scope() as scope:
        # Each window starts its own trace, as Sentry's apply_entry wrapper does; the mark
        # is the one Sentry's apply_async wrapper looks for on beat's publishes.
        scope.set_new_propagation_context()
        scope._name = "celery-beat"
        try:
            _check_in(entry, claim, config, scope, headers)
        except Exception:  # a monitoring problem must never stop a publish (logged)
            logger.exception("safebeat: entry %r: Sentry check-in failed; publishing", entry.name)
        yield


def _monitored(entry: Entry, integration: Any) -> dict[str, Any] | None:
    """The entry's monitor config, or None when it is excluded or cannot be described."""
    from sentry_sdk.utils import match_regex_list  # noqa: PLC0415

    if match_regex_list(entry.name, integration.exclude_beat_tasks):
        return None
    config = monitor_config(entry)
    if config is None:
        _warn_unmonitored(entry)
    return config


def _check_in(
    entry: Entry,
    claim: Claim,
    config: dict[str, Any],
    scope: Any,
    headers: MutableMapping[str, Any],
) -> None:
    from sentry_sdk.crons import MonitorStatus, capture_checkin  # noqa: PLC0415

    capture_checkin(
        monitor_slug=entry.name,
        monitor_config=cast(Any, config),  # a TypedDict in some releases of sentry-sdk
        check_in_id=check_in_id(claim),
        status=MonitorStatus.IN_PROGRESS,
    )
    sentry: dict[str, Any] = {
        SLUG_HEADER: entry.name,
        CONFIG_HEADER: config,
        CHECK_IN_HEADER: check_in_id(claim),
        START_HEADER: f"{time.time():.9f}",
    }
    sentry.update(scope.iter_trace_propagation_headers())
    headers.update(sentry)
    # Celery hands the worker only a nested "headers" mapping as request.headers
    # (celery#4875); Sentry's worker side reads its keys from there.
    nested = dict(headers.get("headers") or {})
    nested.update(sentry)
    headers["headers"] = nested


def _warn_unmonitored(entry: Entry) -> None:
    if entry.name not in _warned:
        _warned.add(entry.name)
        logger.warning(
            "safebeat: entry %r (%s) has no Sentry Crons monitor: Sentry describes only "
            "crontabs and intervals of whole minutes; add it to exclude_beat_tasks to "
            "silence this",
            entry.name,
            entry.schedule_text,
        )


def _around_publish(publish: hooks.Publish) -> AbstractContextManager[None]:
    return window(publish.entry, publish.claim, publish.headers)


hooks.around_publish(_around_publish, active=monitoring)
