"""`safebeat migrate`, `doctor` and `prune`: keeping the store's schema, setup and size right."""

from __future__ import annotations

import dataclasses
import sys

import click

from safebeat.cli.context import Options, choose_namespace, missing_store, open_store
from safebeat.cli.options import opened, require_app, say, store_options
from safebeat.cli.output import emit_json
from safebeat.cli.plan import changes_in
from safebeat.config import Config, parse_duration
from safebeat.display import printable, span
from safebeat.entries.app_entries import Schedule
from safebeat.errors import SafebeatError
from safebeat.ops import deploy_preview, doctor, operations
from safebeat.ops.deploy_preview import Kind
from safebeat.stores import Store, store_from_config


@click.command()
@store_options
@click.pass_obj
def migrate(options: Options) -> None:
    """Create or upgrade safebeat's tables in the store (safe to run from many places)."""
    config, store = open_store(options, create=True)
    try:
        before, version = operations.migrate(store, config.namespace, actor=operations.cli_actor())
    finally:
        store.close()
    if before == version:
        click.echo(f"{store.display_url}: schema at version {version} already; nothing to do")
    else:
        click.echo(f"{store.display_url}: schema at version {version}")


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@store_options
@click.pass_obj
def doctor_command(options: Options, as_json: bool) -> None:
    """Check the setup for common mistakes; exit 1 if any check finds a problem."""
    config = options.config()
    missing = missing_store(config)
    if missing is not None:
        findings = [doctor.Finding("store", doctor.Level.PROBLEM, missing)]
    else:
        store = store_from_config(config)
        try:
            schedule = _schedule_or_none(options, config, store)
            findings = doctor.run_checks(
                doctor.Context(
                    store=store,
                    config=_doctor_namespace(options, config, store),
                    app=options.app,
                    entries=None if schedule is None else schedule.entries,
                    broken=None if schedule is None else schedule.broken,
                )
            )
        finally:
            store.close()
    if as_json:
        emit_json([dataclasses.asdict(f) for f in findings])
    else:
        for finding in findings:
            click.echo(f"{finding.level.value:8} {finding.check}: {printable(finding.message)}")
    if any(f.level is doctor.Level.PROBLEM for f in findings):
        sys.exit(1)


def _schedule_or_none(options: Options, config: Config, store: Store) -> Schedule | None:
    """The app's schedule with the store's entries added at run time; without them if the
    store cannot be read (the doctor reports the store's problem itself)."""
    try:
        return options.schedule(config, store)
    except SafebeatError:
        return options.schedule(config)


def _doctor_namespace(options: Options, config: Config, store: Store) -> Config:
    """The namespace doctor checks, chosen as every command chooses it.

    Where it cannot be chosen, the checks run on the default: the store check reports an
    unreachable store, and the namespace check lists a store's several namespaces.
    """
    try:
        return choose_namespace(options, config, store, say)
    except SafebeatError:
        return config


@click.command()
@click.option(
    "--older-than",
    help="Delete history older than this (default: safebeat_retention).",
    metavar="DURATION",
)
@click.option(
    "--orphans",
    is_flag=True,
    help="Instead, forget entries no code defines any more (needs -A; see `plan`).",
)
@store_options
@click.pass_obj
def prune(options: Options, older_than: str | None, orphans: bool) -> None:
    """Delete dispatch history and silent replicas past the retention, and expired effect keys.

    With --orphans, delete instead the state of entries registered in the store that the
    app's schedule (-A) no longer defines; their history stays. An entry a live replica
    still runs is kept, since that replica would register it again.
    """
    if orphans:
        _prune_orphans(options)
        return
    with opened(options) as (config, store):
        keep = (
            config.retention if older_than is None else parse_duration(older_than, "--older-than")
        )
        deleted = operations.prune(
            store, config.namespace, before=store.clock() - keep, actor=operations.cli_actor()
        )
    click.echo(f"{store.display_url}: pruned {deleted} row(s) older than {span(keep)}")


def _prune_orphans(options: Options) -> None:
    require_app(options, "prune --orphans", "compares the store with the app's schedule")
    actor = operations.cli_actor()
    with opened(options) as (config, store):
        changes = changes_in(options, config, store)
        forgotten = [
            c.name
            for c in deploy_preview.orphans(changes)
            if operations.forget_entry(store, config.namespace, c.name, actor=actor)
        ]
    for name in forgotten:
        click.echo(f"forgot {name!r}: no code defines it")
    for change in changes:
        if change.kind is Kind.REMOVED and change.run_by:
            click.echo(
                f"kept {change.name!r}: live replica(s) {printable(', '.join(change.run_by))} "
                "still run it; "
                "prune again once they run the new code",
                err=True,
            )
    click.echo(
        f"{store.display_url}: forgot {len(forgotten)} orphaned entr"
        f"{'y' if len(forgotten) == 1 else 'ies'} in namespace {config.namespace!r}"
    )
