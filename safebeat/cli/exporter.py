"""`safebeat exporter`: serve each entry's schedule health, read from the store, to
Prometheus (one process per namespace; docs/metrics.md)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import click

from safebeat.cli.context import Options
from safebeat.cli.options import opened, require_app, store_options
from safebeat.config import parse_duration
from safebeat.entries.app_entries import beat_schedule
from safebeat.entries.runtime_definitions import with_runtime_entries
from safebeat.errors import ConfigError
from safebeat.ops.exporter import ScheduleHealthCollector, serve
from safebeat.ops.schedule_health import DueWindows, NamespaceHealth, namespace_health


def _duration(value: str, name: str) -> timedelta:
    try:
        return parse_duration(value, name)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from exc


@click.command()
@click.option(
    "--port", default=9810, show_default=True, type=click.IntRange(1, 65535), help="HTTP port."
)
@click.option(
    "--address",
    default=None,
    help="Address to listen on. Default: every address, IPv6 and IPv4 (`::`), or "
    "0.0.0.0 on a host without IPv6.",
)
@click.option(
    "--interval",
    default="30s",
    show_default=True,
    help="How often to read the store; a scrape serves the latest reading.",
)
@click.option(
    "--grace",
    default="60s",
    show_default=True,
    help="How far in the past a due window may be, undecided, before its entry counts as "
    "overdue in safebeat_schedule_overdue_entries.",
)
@click.option(
    "--max-entries",
    default=1000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Entries with per-entry series (overdue first, then failing, then paused); "
    "each costs one history read per --interval. 0: totals only.",
)
@click.option(
    "--recent-rows",
    default=10000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Newest dispatch rows read for the failing-entry and unsent-claim totals.",
)
@store_options
@click.pass_obj
def exporter(
    options: Options,
    *,
    port: int,
    address: str | None,
    interval: str,
    grace: str,
    max_entries: int,
    recent_rows: int,
) -> None:
    """Serve, for Prometheus, what the store knows of each entry: next due window, last
    window sent, pause, last success and failure, and the namespace's totals.

    Run one per namespace (a restart of beat changes nothing it serves); needs -A for the
    schedules.
    """
    require_app(options, "safebeat exporter", why="reads each entry's schedule from")
    every = _duration(interval, "--interval").total_seconds()
    grace_span = _duration(grace, "--grace")
    app: Any = options.app  # loaded: require_app saw -A
    with opened(options) as (config, store):
        code = beat_schedule(app, config)
        remembered = DueWindows()

        def read() -> NamespaceHealth:
            schedule = with_runtime_entries(
                code,
                store.runtime_entries(config.namespace),
                app_timezone=app.timezone,
                config=config,
            )
            return namespace_health(
                store,
                config.namespace,
                schedule.entries,
                broken=len(schedule.broken),
                grace=grace_span,
                claim_timeout=config.claim_timeout,
                max_entries=max_entries,
                recent_rows=recent_rows,
                remembered=remembered,
            )

        collector = ScheduleHealthCollector(config.namespace, read, time.monotonic)
        try:
            serve(collector, port=port, address=address, interval=every, stop=threading.Event())
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve on port {port} ({exc}): give --port a free port"
            ) from exc
