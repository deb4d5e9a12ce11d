"""`safebeat plan`: what running the app's schedule would change in the store, before a deploy."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from datetime import datetime, timezone

import click

from safebeat.cli.context import Options, missing_store
from safebeat.cli.options import opened, require_app, store_options
from safebeat.cli.output import emit_json
from safebeat.config import Config
from safebeat.display import printable
from safebeat.ops import deploy_preview
from safebeat.ops.deploy_preview import Change, Kind, describe_windows
from safebeat.ops.overview import replica_statuses
from safebeat.store_urls import redact
from safebeat.stores import Store


def changes_in(options: Options, config: Config, store: Store) -> list[Change]:
    """How the app's schedule (-A) and the entries added at run time differ from what the
    store has registered."""
    schedule = options.schedule(config, store)
    assert schedule is not None  # noqa: S101 - require_app ran first
    return deploy_preview.plan(
        store.states(config.namespace),
        schedule,
        replica_statuses(store, config.namespace),
        store.clock(),
    )


@click.command("plan")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@store_options
@click.pass_obj
def plan_command(options: Options, as_json: bool) -> None:
    """What running this app's schedule (-A) would change in the store, before a deploy.

    Lists entries added, removed (registered, but defined by no code: orphans), changed
    (with the next windows before and after) and broken. Exit status 0 when nothing
    would change, 1 otherwise, so CI can gate a deploy on it.
    """
    require_app(options, "plan", "compares the store with the app's schedule")
    config = options.config()
    if missing_store(config) is not None:  # beat has not run yet: every entry is new
        schedule = options.schedule(config)
        assert schedule is not None  # noqa: S101 - require_app ran first
        display_url = redact(config.url)
        changes = deploy_preview.plan({}, schedule, [], datetime.now(timezone.utc))
    else:
        with opened(options) as (config, store):
            changes = changes_in(options, config, store)
        display_url = store.display_url
    if as_json:
        emit_json(
            {
                "store": display_url,
                "namespace": config.namespace,
                "changes": [dataclasses.asdict(c) for c in changes],
            }
        )
    else:
        _print_plan(display_url, config.namespace, changes)
    if changes:
        sys.exit(1)


_PLAN_HEADINGS = {
    Kind.ADDED: "added",
    Kind.REMOVED: "removed (registered, defined by no code; `prune --orphans` forgets them)",
    Kind.CHANGED: "changed",
    Kind.BROKEN: "broken (beat would skip them)",
}
_PLAN_MARKS = {Kind.ADDED: "+", Kind.REMOVED: "-", Kind.CHANGED: "~", Kind.BROKEN: "!"}


def _print_plan(display_url: str, namespace: str, changes: Sequence[Change]) -> None:
    click.echo(f"store {display_url}, namespace {namespace!r}")
    if not changes:
        click.echo("\nno changes: the store has every entry as the app defines it")
        return
    for kind, heading in _PLAN_HEADINGS.items():
        group = [c for c in changes if c.kind is kind]
        if group:
            click.echo(f"\n{heading}:")
        for change in group:
            click.echo(f"  {_PLAN_MARKS[kind]} {printable(f'{change.name}: {_plan_line(change)}')}")
            if kind is Kind.CHANGED and not change.schedule_changed:
                continue  # same windows: only the arguments, options or policy changed
            if kind in {Kind.REMOVED, Kind.CHANGED}:
                click.echo(f"      next windows before: {describe_windows(change.next_before)}")
            if kind in {Kind.ADDED, Kind.CHANGED}:
                click.echo(f"      next windows after:  {describe_windows(change.next_after)}")
    count = len(changes)
    click.echo(f"\n{count} entr{'y' if count == 1 else 'ies'} would change")


def _plan_line(change: Change) -> str:
    if change.kind is Kind.ADDED:
        return str(change.after)
    if change.kind is Kind.REMOVED:
        running = f" (still run by live {', '.join(change.run_by)})" if change.run_by else ""
        return f"{change.before}{running}"
    if change.kind is Kind.BROKEN:
        return str(change.problem)
    if change.schedule_changed:
        return f"{change.before} -> {change.after}"
    return f"{change.after} (arguments, options or policy changed)"
