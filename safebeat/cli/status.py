"""`safebeat status` (every entry and replica) and `safebeat health` (the deep health check,
through the store)."""

from __future__ import annotations

import socket
import sys
from typing import Any

import click

from safebeat.cli.context import Options
from safebeat.cli.options import opened, store_options
from safebeat.cli.output import emit_json, fields, table
from safebeat.config import parse_duration
from safebeat.display import printable, span, when
from safebeat.entries.app_entries import Schedule
from safebeat.errors import ConfigError, EntryError, UnreadableState
from safebeat.ops.deploy_preview import RUN_OUTSIDE_CELERY
from safebeat.ops.overview import (
    EntryStatus,
    ReplicaStatus,
    empty_namespace,
    entry_statuses,
    replica_statuses,
)


def _status_row(s: EntryStatus) -> dict[str, Any]:
    return {
        "entry": s.name,
        "last_sent_window": None if s.last_sent is None else s.last_sent.window,
        **fields(
            s,
            "schedule next_window last_window sent_by lag last_outcome last_success "
            "running_since skipped_recently paused paused_until pause_note unreadable "
            "uncomputable searching",
        ),
    }


def _replica_row(r: ReplicaStatus) -> dict[str, Any]:
    return {
        **fields(r.record, "replica version started_at heartbeat_at"),
        "live": r.live,
        "heartbeat_age": r.age,
        "entries": len(r.record.definitions),
    }


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@store_options
@click.pass_obj
def status(options: Options, as_json: bool) -> None:
    """Every entry (next and last window, who sent it, lag, outcome) and the replicas."""
    with opened(options) as (config, store):
        schedule = options.schedule(config, store)
        statuses = entry_statuses(
            store, config.namespace, None if schedule is None else schedule.entries
        )
        if not statuses:
            raise click.ClickException(empty_namespace(store, config.namespace))
        replicas = replica_statuses(store, config.namespace)
    broken = {} if schedule is None else schedule.broken
    unreadable = [
        UnreadableState(s.name, s.unreadable) for s in statuses if s.unreadable is not None
    ]
    uncomputable = [
        EntryError(s.name, f"its windows cannot be computed: {s.uncomputable}")
        for s in statuses
        if s.uncomputable is not None
    ]
    if as_json:
        emit_json(
            {
                "store": store.display_url,
                "namespace": config.namespace,
                "entries": [_status_row(s) for s in statuses],
                "broken": [
                    *({"entry": n, "problem": e.problem} for n, e in sorted(broken.items())),
                    *({"entry": u.entry, "problem": u.problem} for u in unreadable),
                    *({"entry": u.entry, "problem": u.problem} for u in uncomputable),
                ],
                "replicas": [_replica_row(r) for r in replicas],
            }
        )
        return
    click.echo(f"store {store.display_url}, namespace {config.namespace!r}\n")
    click.echo(
        table(
            ["entry", "schedule", "next window", "last sent", "sent by", "lag", "outcome",
             "last success", "running since"],
            [
                [
                    s.name + (" (paused)" if s.paused else ""),
                    s.schedule,
                    _next_cell(s, schedule),
                    when(None if s.last_sent is None else s.last_sent.window),
                    s.sent_by or "-",
                    span(s.lag),
                    "-" if s.last_outcome is None else s.last_outcome.value,
                    when(s.last_success),
                    when(s.running_since),
                ]
                for s in statuses
            ],
        )
    )  # fmt: skip
    paused = [s for s in statuses if s.paused]
    if paused:
        click.echo("\npaused entries (their windows are skipped, reason paused):")
        for s in paused:
            click.echo(f"  {printable(s.name)}: {printable(s.pause_text)}")
    if broken or unreadable or uncomputable:
        click.echo("\nbroken entries (beat skips them):")
        aside = [*unreadable, *uncomputable]
        for name, error in [*sorted(broken.items()), *((u.entry, u) for u in aside)]:
            click.echo(f"  {printable(name)}: {printable(error.problem)}")
    if not replicas:
        click.echo("\nreplicas: none is running (no beat has a heartbeat in this namespace)")
        return
    click.echo("\nreplicas:")
    click.echo(
        table(
            ["replica", "state", "version", "started", "heartbeat age"],
            [
                [
                    r.record.replica,
                    "live" if r.live else "dead",
                    r.record.version,
                    when(r.record.started_at),
                    span(r.age),
                ]
                for r in replicas
            ],
        )
    )


def _next_cell(s: EntryStatus, schedule: Schedule | None) -> str:
    if s.unreadable is not None:
        return "(unreadable)"
    if s.uncomputable is not None or s.searching:
        return "(searching)" if s.uncomputable is None else "(broken)"
    if schedule is None and not s.schedule.startswith(RUN_OUTSIDE_CELERY):
        return "(needs -A)"
    if schedule is not None and s.name in schedule.broken:
        return "(broken)"
    if s.next_window_skipped:
        return f"{when(s.next_window)} (skipped)"
    return when(s.next_window)


@click.command()
@click.option("--any", "any_replica", is_flag=True, help="Pass if any replica is alive.")
@click.option(
    "--max-age",
    default="30s",
    show_default=True,
    help="Oldest heartbeat that counts as alive (3 missed heartbeats by default).",
)
@store_options
@click.pass_obj
def health(options: Options, any_replica: bool, max_age: str) -> None:
    """Exit 0 if a replica on this host (or any, with --any) heartbeated within --max-age.

    The deep check, through the store (`helm test`, a deploy script); for Kubernetes'
    probes, use beat's own /livez and /readyz (safebeat_probe_port).
    """
    try:
        limit = parse_duration(max_age, "--max-age")
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc
    host = socket.gethostname()
    with opened(options) as (config, store):
        replicas = replica_statuses(store, config.namespace)
    mine = replicas if any_replica else [r for r in replicas if r.record.host == host]
    fresh = [r for r in mine if r.age <= limit]
    if fresh:
        best = min(fresh, key=lambda r: r.age)
        click.echo(f"ok: {printable(best.record.replica)} heartbeated {span(best.age)} ago")
        return
    where = "any host" if any_replica else f"host {host!r}"
    last = min(mine, key=lambda r: r.age, default=None)
    seen = f"; the latest was {span(last.age)} ago" if last else ""
    click.echo(
        f"unhealthy: no replica of namespace {config.namespace!r} on {where} heartbeated "
        f"within {span(limit)}{seen}",
        err=True,
    )
    sys.exit(1)
