"""`safebeat pause`, `resume`, `trigger`, `backfill`, ...: an operator acting on an entry.

One command per action of `safebeat.ops.actions.ACTIONS`, made from its declaration: its
options from its fields, its help, and its result printed a line each (a window that
could not be sent on stderr, and exit status 1).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from safebeat.cli.context import Options
from safebeat.cli.options import opened, require_app, store_options
from safebeat.config import Config
from safebeat.display import printable
from safebeat.entries import Entry
from safebeat.ops import operations
from safebeat.ops.actions import ACTIONS, Action, BadField, Field, Kind, Level, Result, Target
from safebeat.stores import Store


def _compiled_entry(options: Options, config: Config, store: Store, name: str) -> Entry:
    """ENTRY as this app's beat runs it (a beat_schedule item, a django-celery-beat row or an
    entry added at run time)."""
    schedule = options.schedule(config, store)
    assert schedule is not None  # noqa: S101 - require_app ran first
    return operations.scheduled_entry(schedule, name, config.namespace)


def report(result: Result) -> None:
    """Print `result` a line each; a window that failed goes to stderr and exits 1."""
    for level, text in result.said():
        click.echo(printable(text), err=level is Level.ERROR)
    if result.failed:
        sys.exit(1)


def _option(field: Field) -> Any:
    if field.kind is Kind.COUNT:
        return click.option(
            field.option,
            field.name,
            default=field.default,
            show_default=True,
            type=click.IntRange(*field.bounds),
            help=field.help,
        )
    return click.option(
        field.option, field.name, required=field.required, help=field.help, metavar=field.metavar
    )


def command(action: Action) -> click.Command:
    """The CLI command of `action`: ENTRY, an option per field, the store's options."""

    def run(options: Options, entry: str, **given: Any) -> None:
        typed = {name: None if value is None else str(value) for name, value in given.items()}
        try:
            values = action.values(typed)
        except BadField as exc:
            raise click.BadParameter(str(exc), param_hint=exc.field.option) from None
        if action.needs_app:
            require_app(options, action.name, action.needs_app)
        with opened(options) as (config, store):
            target = Target(
                store,
                config.namespace,
                entry,
                operations.cli_actor(),
                app=options.app,
                compile=lambda: _compiled_entry(options, config, store, entry),
            )
            result = action.run(target, values)
        report(result)

    function: Any = click.pass_obj(run)
    function = store_options(function)
    for field in reversed(action.fields):
        function = _option(field)(function)
    function = click.argument("entry")(function)
    return click.command(action.name, help=action.help)(function)


#: The commands, by name (`safebeat.cli.group` finds them here).
COMMANDS = {name: command(action) for name, action in ACTIONS.items()}
pause = COMMANDS["pause"]
resume = COMMANDS["resume"]
trigger = COMMANDS["trigger"]
backfill = COMMANDS["backfill"]
