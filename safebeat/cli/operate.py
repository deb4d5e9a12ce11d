"""`safebeat pause`, `resume`, `trigger` and `backfill`: an operator acting on an entry."""

from __future__ import annotations

import sys

import click

from safebeat.cli.context import Options
from safebeat.cli.options import instant, note_option, opened, require_app, store_options
from safebeat.config import Config
from safebeat.display import printable, when
from safebeat.entries import Entry
from safebeat.ops import operations
from safebeat.records import Pause
from safebeat.stores import Store


@click.command()
@click.argument("entry")
@click.option(
    "--until",
    "until_text",
    help="End the pause by itself at this instant (ISO 8601, with zone).",
    metavar="ISO",
)
@note_option
@store_options
@click.pass_obj
def pause(options: Options, entry: str, until_text: str | None, note: str | None) -> None:
    """Pause ENTRY for every replica: its windows are skipped (reason `paused`) until resumed,
    or with --until until that instant, when every replica resumes it by itself."""
    until = None if until_text is None else instant(until_text, "--until")
    with opened(options) as (config, store):
        pause = Pause(True, until, note)
        operations.pause_entry(store, config.namespace, entry, pause, actor=operations.cli_actor())
    ends = "until resumed" if until is None else f"until {when(until)}, then resumes by itself"
    click.echo(
        f"paused {entry!r} in namespace {config.namespace!r}; "
        f"every replica skips its windows {ends}"
    )


@click.command()
@click.argument("entry")
@note_option
@store_options
@click.pass_obj
def resume(options: Options, entry: str, note: str | None) -> None:
    """Resume ENTRY: its next window is dispatched; windows that passed while paused are not."""
    with opened(options) as (config, store):
        pause = Pause(False, note=note)
        operations.pause_entry(store, config.namespace, entry, pause, actor=operations.cli_actor())
    click.echo(f"resumed {entry!r} in namespace {config.namespace!r}")


def _compiled_entry(options: Options, config: Config, store: Store, name: str) -> Entry:
    """ENTRY as this app's beat runs it (a beat_schedule item, a django-celery-beat row or an
    entry added at run time)."""
    schedule = options.schedule(config, store)
    assert schedule is not None  # noqa: S101 - require_app ran first
    return operations.scheduled_entry(schedule, name, config.namespace)


def _report(published: operations.Published, what: str) -> None:
    for claim in published.sent:
        click.echo(f"{what}: window {when(claim.window)} sent (task id {claim.task_id})")
    for claim in published.unsent:
        click.echo(
            f"{what}: window {when(claim.window)} claimed but the broker is unreachable; "
            "a beat replica re-publishes it after safebeat_claim_timeout"
        )
    for window, error in published.failed.items():
        click.echo(f"{what}: window {window} failed: {printable(error)}", err=True)
    if published.already_claimed:
        click.echo(f"{what}: {published.already_claimed} window(s) already had a row; left alone")
    if published.failed:
        sys.exit(1)


@click.command()
@click.argument("entry")
@note_option
@store_options
@click.pass_obj
def trigger(options: Options, entry: str, note: str | None) -> None:
    """Run ENTRY once now, outside its schedule (recorded with reason `trigger`). Needs -A."""
    require_app(options, "trigger")
    with opened(options) as (config, store):
        compiled = _compiled_entry(options, config, store, entry)
        published = operations.trigger(
            options.app, store, config.namespace, compiled, actor=operations.cli_actor(), note=note
        )
    _report(published, f"triggered {entry!r}")


@click.command()
@click.argument("entry")
@click.option("--from", "start", required=True, help="First instant (ISO 8601, with zone).")
@click.option("--to", "end", required=True, help="Last instant (ISO 8601, with zone).")
@click.option(
    "--limit",
    default=operations.BACKFILL_LIMIT,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Refuse ranges with more windows than this.",
)
@note_option
@store_options
@click.pass_obj
def backfill(
    options: Options, *, entry: str, start: str, end: str, limit: int, note: str | None
) -> None:
    """Dispatch ENTRY's windows between --from and --to that were never sent. Needs -A.

    Windows already sent, skipped or claimed are left alone; each new one is recorded with
    reason `backfill` and keeps its own window (and task id).
    """
    first, last = instant(start, "--from"), instant(end, "--to")
    require_app(options, "backfill")
    with opened(options) as (config, store):
        compiled = _compiled_entry(options, config, store, entry)
        published = operations.backfill(
            options.app,
            store,
            config.namespace,
            compiled,
            start=first,
            end=last,
            limit=limit,
            actor=operations.cli_actor(),
            note=note,
        )
    _report(published, f"backfilled {entry!r}")
